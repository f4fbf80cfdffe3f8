//! The fused input preparation (launch/fused.rs: rope_attention's for wo) against
//! `matvec_prep_wide`.

use super::{Input, prep_of};
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
