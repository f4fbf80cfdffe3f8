//! Experiment CHAIN (`MOLLA_KDEFS=CHAIN`; kernels/layer_chain.cu, docs/cuda-persistent.md
//! session 23): on the graph path's one-token decode, a layer after its attention in one launch
//! (wo, gate/up with the SwiGLU, down, the next layer's q/k/v, handed over by grid-wide counters)
//! instead of seven, with the bits of those launches. Its blocks must all be resident: the grid
//! is the occupancy query's blocks an SM (at most four) times the SMs.

use super::{Out, Prep, Rows, WIDE_THREADS, cfg, glu_buffer, goes_wide, mv_args, xq_bytes};
use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use cudarc::driver::{DeviceRepr, PushKernelArg};

/// kernels/layer_chain.cu `ChainArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ChainArgs {
    wo: super::MvArgs,
    gu: super::MvArgs,
    down: super::MvArgs,
    qkv: super::MvArgs,
    prep0: u64,
    prep1: u64,
}

// SAFETY: plain #[repr(C)] data whose layout matches the CUDA struct.
unsafe impl DeviceRepr for ChainArgs {}

/// A layer's matrices after its attention, and the next layer's q/k/v (none after the last).
pub(crate) struct ChainLayer<'a> {
    /// wo, on the attention's `att_cols`-wide output, which `rope_attention` quantized into
    /// `rows.prep`.
    pub wo: &'a [Out],
    pub att_cols: usize,
    /// Gate and up on RMSNorm(x) (weights, epsilon), x `n_embd` wide.
    pub gu: &'a [Out; 2],
    pub ffn_norm: (u64, f32),
    /// Down on the `n_ff`-wide SwiGLU.
    pub down: &'a [Out],
    pub n_ff: usize,
    /// The next layer's q/k/v and its RMSNorm weights.
    pub qkv: Option<(&'a [Out], u64)>,
    pub x: u64,
    pub n_embd: usize,
}

/// The buffer down's input goes to when the chain kernel is built (`MOLLA_KDEFS=CHAIN`) and `l`
/// can take it: every matrix on `matvec_wide`, and gate/up and down as `matvec_wide_glu` takes
/// them (`glu_buffer`: its second preparation buffer).
fn down_buffer(gpu: &Gpu, l: &ChainLayer, rows: Rows, max_cols: usize) -> Option<Rows> {
    gpu.k.layer_chain.as_ref()?;
    let fits = goes_wide(l.wo, l.att_cols, rows)
        && l.qkv.is_none_or(|(q, _)| goes_wide(q, l.n_embd, rows));
    fits.then(|| glu_buffer(l.gu, l.n_embd, l.down, l.n_ff, rows, max_cols))
        .flatten()
}

/// Whether [`layer_chain`] can run `l` (see `down_buffer`).
pub(crate) fn fits(gpu: &Gpu, l: &ChainLayer, rows: Rows, max_cols: usize) -> bool {
    down_buffer(gpu, l, rows, max_cols).is_some()
}

/// The chain of `l`, with wo's input ready in `rows.prep` (the decode's preparation buffers hold
/// two rows of `prep_stride(max_cols)` bytes).
///
/// # Safety
/// As `matvec_wide` for each matrix.
pub(crate) unsafe fn layer_chain(
    gpu: &Gpu,
    l: &ChainLayer,
    rows: Rows,
    max_cols: usize,
) -> Result<()> {
    let (Some(f), Some(second)) = (
        gpu.k.layer_chain.as_ref(),
        down_buffer(gpu, l, rows, max_cols),
    ) else {
        return Err(CudaError::Unsupported(
            "a layer the chain kernel does not take".into(),
        ));
    };
    let (norm_w, eps) = l.ffn_norm;
    let args = ChainArgs {
        wo: mv_args(l.wo, l.att_cols, 0, Prep::Ready).0,
        gu: mv_args(l.gu, l.n_embd, l.x, Prep::RmsNorm(norm_w, eps)).0,
        down: mv_args(l.down, l.n_ff, 0, Prep::Ready).0,
        qkv: l.qkv.map_or_else(Default::default, |(q, w)| {
            mv_args(q, l.n_embd, l.x, Prep::RmsNorm(w, eps)).0
        }),
        prep0: rows.prep,
        prep1: second.prep,
    };
    // An RMSNorm input's f32 row and its quantization, or a ready row's quantization.
    let smem = (l.n_embd * 4 + xq_bytes(l.n_embd))
        .max(xq_bytes(l.n_ff))
        .max(xq_bytes(l.att_cols));
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(WIDE_THREADS, smem, None)
        .map_err(drv("occupancy"))?
        .min(4) as usize;
    if per_sm == 0 {
        return Err(CudaError::Unsupported(
            "the chain kernel does not fit on an SM".into(),
        ));
    }
    let blocks = (gpu.sm_count * per_sm) as u32;
    super::count_launch();
    super::timeline_mark(gpu, "layer_chain", "chain launch");
    let mut b = gpu.stream.launch_builder(f);
    b.arg(&args);
    // SAFETY: as the caller guarantees; every block is resident (the occupancy query), so the
    // counters' waits can end.
    unsafe { b.launch(cfg((blocks, 1, 1), WIDE_THREADS, smem as u32)) }
        .map(|_| ())
        .map_err(drv("chain launch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_args_match_the_cuda_layout() {
        // Four MvArgs of 168 bytes (8-byte aligned), then the two buffers.
        assert_eq!(std::mem::offset_of!(ChainArgs, gu), 168);
        assert_eq!(std::mem::offset_of!(ChainArgs, qkv), 3 * 168);
        assert_eq!(std::mem::offset_of!(ChainArgs, prep0), 4 * 168);
        assert_eq!(size_of::<ChainArgs>(), 4 * 168 + 16);
    }
}
