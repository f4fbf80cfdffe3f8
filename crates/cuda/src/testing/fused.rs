//! The fused input preparations (launch/fused.rs) against `matvec_prep_wide`.

use super::{Input, Seg, Uploaded, check, fetch, prep_of, upload_segs};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch;

/// `matvec_wide`'s preparation of `x` (`input` as for [`super::matvec`]): the q16 row it writes
/// (`xq_bytes(x.len())` bytes, after the f32 row in its buffer).
pub fn prep_q16(gpu: &Gpu, x: &[f32], input: Input) -> Result<Vec<u8>> {
    let cols = x.len();
    if cols == 0 || !cols.is_multiple_of(32) {
        return Err(CudaError::Unsupported(format!(
            "a prepared input of {cols} values"
        )));
    }
    let xd = gpu.upload(x)?;
    let (_aux, prep) = prep_of(gpu, input, cols)?;
    let buf = gpu.zeros::<u8>(launch::prep_stride(cols))?;
    // SAFETY: x (and aux) hold `cols` values, buf prep_stride(cols) bytes.
    unsafe { launch::prepare(gpu, cols, gpu.ptr(&xd), prep, gpu.ptr(&buf))? };
    q16_of(gpu, &buf, cols)
}

/// The q16 row of a preparation buffer for `cols` values (without the RMSNorm scale after it,
/// which only `matvec_prep_wide` writes).
pub(super) fn q16_of(
    gpu: &Gpu,
    buf: &cudarc::driver::CudaSlice<u8>,
    cols: usize,
) -> Result<Vec<u8>> {
    let mut all = vec![0u8; launch::prep_stride(cols)];
    gpu.download(buf, &mut all)?;
    let mut q = all.split_off(cols * 4);
    q.truncate(launch::xq_bytes(cols));
    Ok(q)
}

/// `matvec_wide_glu` on gate and up (`segs`, as many rows, a multiple of 32) and the `cols`-wide
/// input `x` prepared by `input`: the gate and up outputs, and the q16 row of silu(gate) * up it
/// wrote for down.
pub fn matvec_glu(
    gpu: &Gpu,
    segs: &[Seg; 2],
    cols: usize,
    x: &[f32],
    input: Input,
) -> Result<(Vec<f32>, Vec<f32>, Vec<u8>)> {
    check("matvec input", x.len(), cols)?;
    let n = segs[0].rows;
    check("up rows", segs[1].rows, n)?;
    let xd = gpu.upload(x)?;
    let (_aux, prep) = prep_of(gpu, input, cols)?;
    let up: Uploaded = upload_segs(gpu, segs, cols)?;
    let outs = up.outs(gpu, segs);
    let gu = [outs[0], outs[1]];
    let buf = gpu.zeros::<u8>(launch::prep_stride(cols))?;
    let out = gpu.zeros::<u8>(launch::prep_stride(n))?;
    // SAFETY: every buffer is sized for its matrix or input; buf and out are apart.
    unsafe {
        launch::matvec_wide_glu(
            gpu,
            &gu,
            cols,
            gpu.ptr(&xd),
            prep,
            gpu.ptr(&buf),
            gpu.ptr(&out),
        )?
    };
    Ok((
        fetch(gpu, &up.ys[0], n)?,
        fetch(gpu, &up.ys[1], n)?,
        q16_of(gpu, &out, n)?,
    ))
}
