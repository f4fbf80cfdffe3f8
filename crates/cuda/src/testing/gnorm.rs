//! `MOLLA_KDEFS=GNORM`'s producer (launch/gnorm.rs `matvec_wide_gnp`), for its tests against
//! `matvec_wide` (the new x) and `matvec_prep_wide` (the next RMSNorm's q16 row).

use super::{Input, Seg, fetch, prep_of, upload_segs, wide_in};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch;

/// Whether this device's kernels include GNORM's (opened under `MOLLA_KDEFS=GNORM`).
pub fn gnorm_built(gpu: &Gpu) -> bool {
    launch::gnorm_built(gpu)
}

/// What `matvec_wide_gnp` leaves: the new x, the q16 row of x times the norm weights
/// (`xq_bytes(rows)` bytes) and the groups' sums of squares.
pub struct Grouped {
    pub x: Vec<f32>,
    pub q16: Vec<u8>,
    pub partials: Vec<f64>,
}

/// `seg` (one residual matrix: `acc` given, no bias) on `x` (`cols` values prepared by
/// `input`) through `matvec_wide_gnp`, preparing x times the norm weights `gw` (`seg.rows`).
pub fn gnorm_producer(
    gpu: &Gpu,
    seg: &Seg,
    cols: usize,
    x: &[f32],
    input: Input,
    gw: &[f32],
) -> Result<Grouped> {
    let rows = seg.rows;
    if seg.acc.is_none() || seg.bias.is_some() || gw.len() != rows || x.len() != cols {
        return Err(CudaError::Unsupported(
            "a grouped producer: one residual matrix without bias, norm weights of its rows".into(),
        ));
    }
    let xd = gpu.upload(x)?;
    let gwd = gpu.upload(gw)?;
    let (_aux, prep) = prep_of(gpu, input, cols)?;
    let up = upload_segs(gpu, std::slice::from_ref(seg), cols)?;
    let out = up.outs(gpu, std::slice::from_ref(seg))[0];
    let (_buf, input) = wide_in(gpu, cols, &xd, prep)?;
    let gbuf = gpu.zeros::<u8>(launch::gnorm_stride(rows))?;
    // SAFETY: every buffer above is sized for its matrix and input; gw holds `rows` weights and
    // gbuf gnorm_stride(rows) bytes.
    unsafe { launch::matvec_wide_gnp(gpu, out, input, gpu.ptr(&gwd), gpu.ptr(&gbuf))? };
    gpu.sync()?;
    let mut all = vec![0u8; launch::gnorm_stride(rows)];
    gpu.download(&gbuf, &mut all)?;
    let q0 = rows * 4;
    let p0 = launch::prep_stride(rows);
    Ok(Grouped {
        x: fetch(gpu, &up.ys[0], rows)?,
        q16: all[q0..q0 + launch::xq_bytes(rows)].to_vec(),
        partials: all[p0..p0 + rows / 32 * 8]
            .chunks_exact(8)
            .map(|b| {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                f64::from_le_bytes(w)
            })
            .collect(),
    })
}
