//! The decode step's RMSNorm inputs prepared by wo and down (`MOLLA_KDEFS=GNORM`, an experiment;
//! launch/gnorm.rs): which steps take them, and the launches that make and read them.

use super::{CudaModel, DevLayer, PERSISTENT_MAX_LAYER_BYTES};
use crate::error::Result;
use crate::launch::{self, Out, Prep, Rows, Skip, WideIn};
use crate::weights::DevMatrix;
use std::sync::atomic::Ordering;

/// Where the grouped inputs go: the decode buffer past its first `prep_stride(max_cols)` bytes
/// (kv.rs allocates `gnorm_stride(n_embd)` more when the kernels are built), 256-byte aligned.
pub(crate) fn gnorm_offset(hp: &model::HParams) -> usize {
    launch::prep_stride(launch::max_cols(hp)).next_multiple_of(256)
}

/// `MOLLA_GNORM=1`: GNORM for any model the persistent kernel does not decode (read once).
fn forced() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_GNORM").is_ok_and(|v| v == "1"))
}

impl CudaModel {
    /// The decode buffer's grouped part when this step takes GNORM: the kernels built, one
    /// token, no launch left out (`MOLLA_GRAPH_SKIP`), and a model the persistent kernel does
    /// not decode: layers of a big model's size (the 8B's), or any model with `MOLLA_GNORM=1`.
    pub(super) fn gnorm(&self, rows: Rows, skip: Skip) -> Option<u64> {
        let big = || {
            self.layers.iter().map(DevLayer::bytes).max().unwrap_or(0) >= PERSISTENT_MAX_LAYER_BYTES
        };
        let on = launch::gnorm_built(&self.gpu)
            && rows.n == 1
            && rows.prep != 0
            && skip.bits() == 0
            && !self.persistent.load(Ordering::Relaxed)
            && (forced() || big());
        on.then(|| rows.prep + gnorm_offset(&self.hp) as u64)
    }

    /// The matvec of `outs` on RMSNorm(x) * w: from the grouped part `grouped` when the launch
    /// before prepared it there (Some), else as `launch::matvec_rows` prepares it.
    ///
    /// # Safety
    /// As `launch::matvec_rows`; `grouped` prepared for x by the launch before.
    pub(super) unsafe fn norm_matvec(
        &self,
        outs: &[Out],
        x: u64,
        norm: Prep,
        rows: Rows,
        grouped: Option<u64>,
    ) -> Result<()> {
        let cols = self.hp.n_embd;
        let (prep, rows) = match (grouped, norm) {
            (Some(buf), Prep::RmsNorm(w, eps)) => {
                (Prep::Grouped(w, eps), Rows { prep: buf, ..rows })
            }
            _ => (norm, rows),
        };
        // SAFETY: as the caller guarantees.
        unsafe { launch::matvec_rows(&self.gpu, outs, cols, x, prep, rows) }
    }

    /// The residual matvec `out` (wo or down, accumulated onto x) on `cols` inputs at `input`
    /// prepared by `prep`; with the grouped part `gn` and `next_w` (the next RMSNorm's weights,
    /// Some when the matvec that reads its input goes wide), also that input prepared into
    /// `gn`. Returns whether it was.
    ///
    /// # Safety
    /// As `launch::matvec_rows`; `next_w` holds n_embd weights.
    pub(super) unsafe fn residual_matvec(
        &self,
        out: Out,
        (cols, input, prep): (usize, u64, Prep),
        rows: Rows,
        gn: Option<u64>,
        next_w: Option<u64>,
    ) -> Result<bool> {
        let g = &self.gpu;
        if let (Some(gbuf), Some(gw)) = (gn, next_w)
            && launch::goes_wide(&[out], cols, rows)
            && launch::gnorm_takes(g, &out, cols)
        {
            let input = WideIn {
                cols,
                x: input,
                prep,
                buf: rows.prep,
            };
            // SAFETY: as the caller guarantees; the grouped part is read only by the next
            // norm's matvec, which runs after this launch.
            unsafe { launch::matvec_wide_gnp(g, out, input, gw, gbuf) }?;
            return Ok(true);
        }
        // SAFETY: as the caller guarantees.
        unsafe { launch::matvec_rows(g, &[out], cols, input, prep, rows) }?;
        Ok(false)
    }

    /// The weights of the RMSNorm after layer `li`'s down (the next layer's attention norm, or
    /// the output norm), when its reader (that layer's q/k/v, or the head into `logits`) goes
    /// wide.
    pub(super) fn next_norm(
        &self,
        li: usize,
        qkv: (u64, u64, u64),
        logits: u64,
        rows: Rows,
    ) -> Option<u64> {
        let (wide, w) = match self.layers.get(li + 1) {
            Some(nl) => (
                self.norm_reads_wide(&self.qkv_outs(li + 1, qkv), rows),
                &nl.attn_norm,
            ),
            None => (
                self.norm_reads_wide(&[self.head_out(logits)], rows),
                &self.output_norm,
            ),
        };
        wide.then(|| self.gpu.ptr(w))
    }

    /// Whether the matvec of `outs` on an RMSNorm input goes wide.
    pub(super) fn norm_reads_wide(&self, outs: &[Out], rows: Rows) -> bool {
        launch::goes_wide(outs, self.hp.n_embd, rows)
    }

    /// The matrices of the q/k/v matvec of layer `li` (the next norm's reader after a down).
    pub(super) fn qkv_outs(&self, li: usize, (q, k, v): (u64, u64, u64)) -> [Out; 3] {
        let l = &self.layers[li];
        let out = |w: &DevMatrix, y: u64, b| self.out(w, y, b, false);
        [
            out(&l.wq, q, self.opt(&l.bq)),
            out(&l.wk, k, self.opt(&l.bk)),
            out(&l.wv, v, self.opt(&l.bv)),
        ]
    }
}
