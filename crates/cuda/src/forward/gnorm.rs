//! The decode step's RMSNorm inputs prepared by wo and down (`MOLLA_KDEFS=GNORM`, an experiment;
//! launch/gnorm.rs): which steps take them, and the launches that make and read them.

use super::{CudaModel, DevLayer, PERSISTENT_MAX_LAYER_BYTES};
use crate::error::Result;
use crate::launch::{self, Out, Prep, Rows, Skip, WideIn};
use crate::weights::DevMatrix;
use std::sync::atomic::Ordering;

/// Where the grouped inputs go: the decode buffer past its first `prep_stride(max_cols)` bytes
/// (kv.rs allocates `gnorm_stride(n_embd)` more), 256-byte aligned.
pub(crate) fn gnorm_offset(hp: &model::HParams) -> usize {
    launch::prep_stride(launch::max_cols(hp)).next_multiple_of(256)
}

/// A decode step that takes GNORM (see [`CudaModel::gnorm`]).
pub(super) struct Gn {
    /// The decode buffer's grouped half.
    pub buf: u64,
}

impl CudaModel {
    /// The grouped half of the decode buffer when this step takes GNORM: the kernels built, one
    /// token, no launch left out (`MOLLA_GRAPH_SKIP`), and a model the persistent kernel does
    /// not decode: layers of a big model's size (the 8B's), or any model with `MOLLA_GNORM=1`.
    pub(super) fn gnorm(&self, rows: Rows, skip: Skip) -> Option<Gn> {
        let big = self.layers.iter().map(DevLayer::bytes).max().unwrap_or(0)
            >= PERSISTENT_MAX_LAYER_BYTES;
        let forced = std::env::var("MOLLA_GNORM").is_ok_and(|v| v == "1");
        let on = launch::gnorm_built(&self.gpu)
            && rows.n == 1
            && rows.prep != 0
            && skip.bits() == 0
            && !self.persistent.load(Ordering::Relaxed)
            && (big || forced);
        on.then(|| Gn {
            buf: rows.prep + gnorm_offset(&self.hp) as u64,
        })
    }

    /// The matvec of `outs` on RMSNorm(x) * w: from the grouped input when `grouped` (the
    /// launch before prepared it), else as `launch::matvec_rows` prepares it.
    ///
    /// # Safety
    /// As `launch::matvec_rows`; with `grouped`, `gn.buf` prepared for x by the launch before.
    pub(super) unsafe fn norm_matvec(
        &self,
        outs: &[Out],
        x: u64,
        norm: Prep,
        rows: Rows,
        gn: Option<&Gn>,
        grouped: bool,
    ) -> Result<()> {
        let cols = self.hp.n_embd;
        let (prep, rows) = match (gn, grouped, norm) {
            (Some(gn), true, Prep::RmsNorm(w, eps)) => (
                Prep::Grouped(w, eps),
                Rows {
                    prep: gn.buf,
                    ..rows
                },
            ),
            _ => (norm, rows),
        };
        // SAFETY: as the caller guarantees.
        unsafe { launch::matvec_rows(&self.gpu, outs, cols, x, prep, rows) }
    }

    /// The residual matvec `out` (wo or down, accumulated onto x) on `cols` inputs at `input`
    /// prepared by `prep`; with `gn` and when `next` (the matvec that reads the next RMSNorm's
    /// input, on `next_w`'s norm) goes wide, also that input prepared into `gn.buf`. Returns
    /// whether it was.
    ///
    /// # Safety
    /// As `launch::matvec_rows`; `next_w` holds n_embd weights.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn residual_matvec(
        &self,
        out: Out,
        (cols, input, prep): (usize, u64, Prep),
        rows: Rows,
        gn: Option<&Gn>,
        next: &[Out],
        next_w: u64,
    ) -> Result<bool> {
        let g = &self.gpu;
        if let Some(gn) = gn
            && launch::goes_wide(&[out], cols, rows)
            && launch::goes_wide(next, self.hp.n_embd, rows)
            && launch::gnorm_takes(g, &out, cols)
        {
            let input = WideIn {
                cols,
                x: input,
                prep,
                buf: rows.prep,
            };
            // SAFETY: as the caller guarantees; the grouped half is read only by the next
            // norm's matvec, which runs after this launch.
            unsafe { launch::matvec_wide_gnp(g, out, input, next_w, gn.buf) }?;
            return Ok(true);
        }
        // SAFETY: as the caller guarantees.
        unsafe { launch::matvec_rows(g, &[out], cols, input, prep, rows) }?;
        Ok(false)
    }

    /// What reads the RMSNorm input after layer `li`'s down: the next layer's q/k/v (three
    /// matrices) and its attention norm's weights, or the head into `logits` (one) and the
    /// output norm's.
    pub(super) fn next_norm(
        &self,
        li: usize,
        qkv: (u64, u64, u64),
        logits: u64,
    ) -> ([Out; 3], usize, u64) {
        match self.layers.get(li + 1) {
            Some(nl) => (self.qkv_outs(li + 1, qkv), 3, self.gpu.ptr(&nl.attn_norm)),
            None => (
                [self.head_out(logits); 3],
                1,
                self.gpu.ptr(&self.output_norm),
            ),
        }
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
