//! `MOLLA_KDEFS=GNORM` (an experiment, session 61; kernels/gnorm.cu): on the graph path's
//! one-token decode of a big model, wo and down (accumulated onto x) run in blocks of 32 rows
//! that also quantize the next RMSNorm's input x * w, one q16 block each, and leave each
//! block's sum of squares as a partial of the scale's sum (`matvec_wide_gnp`); q/k/v, gate/up
//! and the head then read that buffer (`Prep::Grouped`, `matvec_wide_gnc`) instead of a
//! `matvec_prep_wide` launch's. The scale's sum is in another order than `rms_scale`'s, so only
//! paths that all take it give each other's bits (forward/gnorm.rs `CudaModel::gnorm`).

use super::{
    LaunchConfig, MvArgs, Out, Prep, WideIn, cfg, is_q16, launch_dep, prep_stride, wide_setup,
    xq_bytes,
};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use cudarc::driver::{CudaFunction, PushKernelArg};

/// The most groups of 32 values `matvec_wide_gnc` adds (kernels/gnorm.cu `GN_MAX_PER_LANE`
/// a lane).
const MAX_GROUPS: usize = 8 * 32;

/// Whether the GNORM kernels are built (`MOLLA_KDEFS=GNORM`).
pub(crate) fn gnorm_built(gpu: &Gpu) -> bool {
    gpu.k.matvec_wide_gnp.is_some() && gpu.k.matvec_wide_gnc.is_some()
}

/// One of the GNORM kernels, or why it is missing.
fn built(f: &Option<CudaFunction>) -> Result<&CudaFunction> {
    f.as_ref().ok_or_else(|| {
        CudaError::Unsupported("grouped RMSNorm inputs without MOLLA_KDEFS=GNORM".into())
    })
}

/// Bytes of a buffer `matvec_wide_gnp` prepares a `cols`-wide input into: `prep_stride`'s, then
/// one f64 partial a group of 32 values.
pub(crate) fn gnorm_stride(cols: usize) -> usize {
    prep_stride(cols) + cols / 32 * 8
}

/// Whether `matvec_wide_gnp` can compute `out` on a `cols`-wide input: one q16 matrix
/// accumulated onto its output in plain f32 (no bias), of whole groups of 32 rows, at most
/// `MAX_GROUPS` of them, and the kernels built.
pub(crate) fn gnorm_takes(gpu: &Gpu, out: &Out, cols: usize) -> bool {
    let rows = out.w.rows;
    gnorm_built(gpu)
        && out.accumulate
        && !out.fixed
        && out.bias == 0
        && is_q16(out.w.ty)
        && cols.is_multiple_of(32)
        && rows.is_multiple_of(32)
        && rows / 32 <= MAX_GROUPS
}

/// `out` (see [`gnorm_takes`]) on `input` as `matvec_wide` computes it (the same bits of x),
/// and the next RMSNorm's input, x times the norm weights at `gw`, prepared into `gbuf`
/// (`gnorm_stride(rows)` bytes) for [`Prep::Grouped`].
///
/// # Safety
/// As [`super::matvec_wide`]; `gw` holds `out.w.rows` weights and `gbuf` `gnorm_stride(rows)`
/// bytes that no launch in flight reads.
pub(crate) unsafe fn matvec_wide_gnp(
    gpu: &Gpu,
    out: Out,
    input: WideIn,
    gw: u64,
    gbuf: u64,
) -> Result<()> {
    let f = built(&gpu.k.matvec_wide_gnp)?;
    if !gnorm_takes(gpu, &out, input.cols) || matches!(input.prep, Prep::Grouped(..)) {
        return Err(CudaError::Unsupported(
            "a grouped RMSNorm input from other than one accumulated q16 matrix".into(),
        ));
    }
    // SAFETY: as the caller guarantees.
    let (a, _) = unsafe { wide_setup(gpu, &[out], input) }?;
    let cfg = cfg(
        ((out.w.rows / 32) as u32, 1, 1),
        1024,
        xq_bytes(input.cols) as u32,
    );
    let buf = input.buf;
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
    unsafe { launch_dep!(gpu, f, cfg, "matvec launch"; &a, &buf, &gw, &gbuf) }
}

/// `matvec_wide` on a [`Prep::Grouped`] input in `buf` (`a` and `cfg` from `wide_setup`).
///
/// # Safety
/// As [`super::matvec_wide`], `buf` prepared by [`matvec_wide_gnp`] for `a.cols` values.
pub(super) unsafe fn matvec_wide_gnc(
    gpu: &Gpu,
    a: &MvArgs,
    cfg: LaunchConfig,
    buf: u64,
    flagged: bool,
) -> Result<()> {
    let f = built(&gpu.k.matvec_wide_gnc)?;
    if flagged || a.cols as usize / 32 > MAX_GROUPS {
        return Err(CudaError::Unsupported(
            "a grouped RMSNorm input to a flagged or too wide matvec".into(),
        ));
    }
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
    unsafe { launch_dep!(gpu, f, cfg, "matvec launch"; a, &buf) }
}
