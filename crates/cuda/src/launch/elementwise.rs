//! Element-wise launches: the gated units of prefill (SwiGLU, GeGLU), a branch added onto the
//! residual stream, scaled (and soft-capped) embeddings and logits, and the gather of a batch's
//! wanted rows. See the parent module's safety contract.

use super::{cfg, count_launch, stride_grid};
use crate::device::Gpu;
use crate::error::{Result, drv};
use cudarc::driver::PushKernelArg;
use model::FfnAct;

/// `g = act(g) * u` over `n` values: SwiGLU (silu) or gemma's GeGLU (gelu_tanh).
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn glu(gpu: &Gpu, act: FfnAct, g: u64, u: u64, n: usize) -> Result<()> {
    let (f, what) = match act {
        FfnAct::Silu => (&gpu.k.swiglu, "swiglu launch"),
        FfnAct::GeluTanh => (&gpu.k.geglu, "geglu launch"),
    };
    let n_i = n as i32;
    let mut b = gpu.stream.launch_builder(f);
    b.arg(&g).arg(&u).arg(&n_i);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((n.div_ceil(256) as u32, 1, 1), 256, 0)) }.map_err(drv(what))?;
    Ok(())
}

/// `x += h` over `rows` rows of `n` values, `h` first RMS-normed by the weights at `norm` (not
/// 0) and multiplied by `scale` (not 1): a block's branch onto the residual stream (cpu/src/
/// block.rs `add_branch`). `h` is overwritten.
///
/// # Safety
/// See the module docs; `norm` is 0 or holds `n` weights.
pub(crate) unsafe fn add_branch(
    gpu: &Gpu,
    x: u64,
    h: u64,
    norm: u64,
    (rows, n): (usize, usize),
    eps: f32,
    scale: f32,
) -> Result<()> {
    let n_i = n as i32;
    let mut b = gpu.stream.launch_builder(&gpu.k.add_branch);
    b.arg(&x).arg(&h).arg(&norm).arg(&n_i).arg(&eps).arg(&scale);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((rows as u32, 1, 1), 256, 0)) }.map_err(drv("add_branch launch"))?;
    Ok(())
}

/// The `n` values at `x` times `mul` (1: none), then soft-capped to `cap * tanh(v / cap)` (0:
/// none): scaled embeddings, and logits as the CPU's `finish_logits` makes them.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn scale_cap(gpu: &Gpu, x: u64, mul: f32, cap: f32, n: usize) -> Result<()> {
    let n_i = n as i64;
    let mut b = gpu.stream.launch_builder(&gpu.k.scale_cap);
    b.arg(&x).arg(&mul).arg(&cap).arg(&n_i);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((stride_grid(gpu, n), 1, 1), 256, 0)) }.map_err(drv("scale launch"))?;
    Ok(())
}

/// `out` row t = `x` row `idx[t]` (device i32s), for `n` rows of `cols` values.
///
/// # Safety
/// See the module docs; every index names a row of `x`, and `out` holds `n` rows.
pub(crate) unsafe fn gather_rows(
    gpu: &Gpu,
    x: u64,
    idx: u64,
    out: u64,
    n: usize,
    cols: usize,
) -> Result<()> {
    let c = cols as i32;
    let mut b = gpu.stream.launch_builder(&gpu.k.gather_rows);
    b.arg(&x).arg(&idx).arg(&out).arg(&c);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((n as u32, 1, 1), 128, 0)) }.map_err(drv("gather launch"))?;
    Ok(())
}
