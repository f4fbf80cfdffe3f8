//! Input preparations folded into the kernel before them, on the graph path's one-token decode.
//! A `matvec_wide` reads its input as a q16 row that `matvec_prep_wide` writes in a launch of its
//! own, four times a layer. Two of the four inputs are quantized block by block (32 values) with
//! no reduction over the whole row, so the kernel that computes them can quantize them too, with
//! the same bits:
//! - `rope_attention` quantizes each head's output for wo: the default since session 28
//!   (`MOLLA_ATT_PREP=0` turns it off; on the 8B file +2.1%, 442.5 / 442.4 tok/s against
//!   433.6 / 433.2 on the H200);
//! - `MOLLA_GLU_PREP=1` (an experiment): `matvec_wide_glu` computes gate and up and quantizes
//!   silu(gate) * up for down. Level with the default on the 8B file (session 26); a version that
//!   walks `matvec_wide`'s rows and hands each group of 32 to the warp completing it by tickets
//!   measured 5% slower (session 28; the code is in 1c63d6b). Since session 49 its Q4_K rows take
//!   `matvec_wide`'s lean walk and it no longer loads back the gate and up values it stored (not
//!   yet measured).
//!
//! The other two, the RMSNorm inputs, need the whole row's sum of squares; preparing them in the
//! last block of wo and down (session 25's `MOLLA_NORM_LAST`) measured 7% slower on the 8B file
//! (session 26; the code is in 02125c3).

use super::{
    Out, Prep, Rows, WIDE_THREADS, cfg, goes_wide, is_q16, mv_args, prep_stride, prep_wide,
    xq_bytes,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::pdl::launch_dep;
use cudarc::driver::PushKernelArg;

/// Whether `rope_attention` quantizes wo's input (unless `MOLLA_ATT_PREP=0`; read once).
pub(crate) fn att_prep_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_ATT_PREP").map_or(true, |v| v != "0"))
}

/// Whether the gate/up matvec quantizes down's input (`MOLLA_GLU_PREP=1`; read once).
pub(crate) fn glu_prep_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_GLU_PREP").is_ok_and(|v| v == "1"))
}

/// The second preparation buffer `matvec_wide_glu` writes down's input into, after the first in
/// a decode buffer of two rows (`rows.prep` holds `2 * prep_stride(max_cols)` bytes), when gate
/// and up (`gu`, on `cols` inputs) and down (`down`, on `n_ff`) can take that path: both on
/// `matvec_wide`, gate and up of one row count, a multiple of 32.
pub(crate) fn glu_buffer(
    gu: &[Out; 2],
    cols: usize,
    down: &[Out],
    n_ff: usize,
    rows: Rows,
    max_cols: usize,
) -> Option<Rows> {
    let second = Rows {
        n: 1,
        prep: rows.prep + prep_stride(max_cols) as u64,
    };
    let fits = gu[0].w.rows == n_ff
        && gu[1].w.rows == n_ff
        && n_ff.is_multiple_of(32)
        && goes_wide(gu, cols, rows)
        && goes_wide(down, n_ff, second);
    fits.then_some(second)
}

/// Gate and up (`gu`) on the `cols`-wide input `x` (prepared by `prep` into `buf`), stored as
/// `matvec_wide` stores them, with silu(gate) * up quantized into `out` for down
/// (`Prep::Ready`). Two launches: the preparation and `matvec_wide_glu`.
///
/// # Safety
/// As `matvec_wide`; `buf` and `out` each hold `prep_stride` bytes of their input, apart.
pub(crate) unsafe fn matvec_wide_glu(
    gpu: &Gpu,
    gu: &[Out; 2],
    cols: usize,
    x: u64,
    prep: Prep,
    buf: u64,
    out: u64,
) -> Result<()> {
    let n = gu[0].w.rows;
    if !gu.iter().all(|o| is_q16(o.w.ty) && o.w.rows == n)
        || !n.is_multiple_of(32)
        || !cols.is_multiple_of(32)
    {
        return Err(CudaError::Unsupported(
            "gate/up SwiGLU matvec of other shapes or formats".into(),
        ));
    }
    let (a, _) = mv_args(gu, cols, x, prep);
    if !prep.is_ready() {
        // SAFETY: the caller guarantees the addresses and the buffer's size.
        unsafe { prep_wide(gpu, &a, cols, buf) }?;
    }
    let blocks = (n / 32).clamp(1, super::wide_max_blocks(gpu)) as u32;
    let smem = xq_bytes(cols) as u32;
    let cfg = cfg((blocks, 1, 1), WIDE_THREADS, smem);
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
    unsafe { launch_dep!(gpu, &gpu.k.matvec_wide_glu, cfg, "matvec launch"; &a, &buf, &out) }
}

/// `matvec_wide`'s input preparation alone: `x` (`cols` values) prepared by `prep` into `buf`
/// (the conformance tests compare the fused preparations with it).
///
/// # Safety
/// As `matvec_wide`, with `buf` holding `prep_stride(cols)` bytes.
pub(crate) unsafe fn prepare(gpu: &Gpu, cols: usize, x: u64, prep: Prep, buf: u64) -> Result<()> {
    let (a, _) = mv_args(&[], cols, x, prep);
    // SAFETY: as the caller guarantees.
    unsafe { prep_wide(gpu, &a, cols, buf) }
}
