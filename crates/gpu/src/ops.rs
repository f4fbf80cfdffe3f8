//! Each op on its own: uploads the inputs, runs one dispatch, reads the result back. For the
//! conformance tests against the CPU reference (the forward pass uses the same dispatches,
//! bound once, through `kernels`).

use crate::device::Gpu;
use crate::error::{GpuError, Result};
use crate::kernels::{self, DevMatrix, Dispatch, Heads, KvLayer, MatvecOpts};
use gguf::GgmlType;

fn run(
    gpu: &Gpu,
    list: &[Dispatch],
    n: usize,
    out: &wgpu::Buffer,
    floats: usize,
) -> Result<Vec<f32>> {
    let mut enc = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    kernels::encode(&mut enc, &[list], n as u32);
    gpu.submit_read(enc, out, (floats * 4) as u64)
}

fn step(gpu: &Gpu, n: usize, start: usize) -> wgpu::Buffer {
    gpu.uniform("step", &[n as u32, start as u32])
}

fn check(what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(GpuError::Unsupported(format!(
            "{what}: {got} values where {want} are needed"
        )))
    }
}

/// `n` rows of `w · x[t]` for a `rows` x `cols` matrix of type `ty` (`bytes` in GGUF layout),
/// plus `bias` when given.
pub fn matvec(
    gpu: &Gpu,
    ty: GgmlType,
    bytes: &[u8],
    shape: (usize, usize),
    x: &[f32],
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    matvec_in_parts(gpu, ty, bytes, shape, x, bias, usize::MAX)
}

/// [`matvec`] with the matrix uploaded in parts of at most `part_rows` rows (as matrices larger
/// than the adapter's binding limit are).
pub fn matvec_in_parts(
    gpu: &Gpu,
    ty: GgmlType,
    bytes: &[u8],
    (rows, cols): (usize, usize),
    x: &[f32],
    bias: Option<&[f32]>,
    part_rows: usize,
) -> Result<Vec<f32>> {
    let n = x.len() / cols.max(1);
    check("matvec input", x.len(), n * cols)?;
    let w = DevMatrix::in_parts(gpu, "w", ty, (rows, cols), bytes, part_rows)?;
    let xb = gpu.upload_f32("x", x)?;
    let y = gpu.storage("y", (n * rows * 4) as u64)?;
    let bb = bias.map(|b| gpu.upload_f32("bias", b)).transpose()?;
    let dummy = gpu.storage("dummy", 4)?;
    let st = step(gpu, n, 0);
    let o = MatvecOpts {
        bias: bb.as_ref(),
        ..Default::default()
    };
    let d = kernels::matvec(gpu, &w, &xb, &y, &st, &dummy, o)?;
    run(gpu, &d, n, &y, n * rows)
}

/// Rows `tokens` of a `rows` x `cols` matrix of type `ty`, dequantized (the matrix uploaded
/// in parts of at most `part_rows` rows).
pub fn embed(
    gpu: &Gpu,
    ty: GgmlType,
    bytes: &[u8],
    (rows, cols): (usize, usize),
    tokens: &[u32],
    part_rows: usize,
) -> Result<Vec<f32>> {
    let w = DevMatrix::in_parts(gpu, "w", ty, (rows, cols), bytes, part_rows)?;
    let tb = gpu.upload_bytes("tokens", bytemuck::cast_slice(tokens))?;
    let n = tokens.len();
    let y = gpu.storage("y", (n * cols * 4) as u64)?;
    let st = step(gpu, n, 0);
    let d = kernels::embed(gpu, &w, &tb, &y, &st)?;
    run(gpu, &d, n, &y, n * cols)
}

/// RMSNorm of the rows of `x` (rows of `g.len()`).
pub fn rms_norm(gpu: &Gpu, x: &[f32], g: &[f32], eps: f32) -> Result<Vec<f32>> {
    let cols = g.len().max(1);
    let n = x.len() / cols;
    check("rms_norm input", x.len(), n * cols)?;
    let (xb, gb) = (gpu.upload_f32("x", x)?, gpu.upload_f32("g", g)?);
    let y = gpu.storage("y", (x.len() * 4) as u64)?;
    let st = step(gpu, n, 0);
    let d = kernels::rms_norm(gpu, &xb, &gb, &y, &st, cols, eps, false)?;
    run(gpu, &[d], n, &y, x.len())
}

/// RoPE of `n` query rows and key rows at positions `start..start + n`.
pub fn rope(
    gpu: &Gpu,
    h: Heads,
    rope: &cpu::ops::Rope,
    q: &[f32],
    k: &[f32],
    start: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let n = q.len() / (h.n_head * h.head_dim);
    check("rope keys", k.len(), n * h.n_head_kv * h.head_dim)?;
    let table = gpu.upload_f32("rope", &kernels::rope_table(rope, start + n))?;
    let (qb, kb) = (gpu.upload_f32("q", q)?, gpu.upload_f32("k", k)?);
    let st = step(gpu, n, start);
    let d = kernels::rope(gpu, h, &qb, &kb, &table, &st)?;
    let qo = run(gpu, &[d], n, &qb, q.len())?;
    let enc = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    let ko = gpu.submit_read(enc, &kb, (k.len() * 4) as u64)?;
    Ok((qo, ko))
}

/// Attention of `n` query rows at positions `start..start + n` over keys and values of
/// positions `0..start + n` (stored first into an f32 or f16 cache of `start + n` positions),
/// over the last `window` positions only when it is not 0.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    gpu: &Gpu,
    h: Heads,
    f16: bool,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    start: usize,
    window: usize,
) -> Result<Vec<f32>> {
    let n = q.len() / (h.n_head * h.head_dim);
    let total = start + n;
    let (kv_dim, v_dim) = (h.n_head_kv * h.head_dim, h.n_head_kv * h.head_dim_v);
    check("attention keys", keys.len(), total * kv_dim)?;
    check("attention values", values.len(), total * v_dim)?;
    let per = if f16 { 2 } else { 4 };
    let kc = gpu.storage("k cache", (total * kv_dim * per) as u64)?;
    let vc = gpu.storage("v cache", (total * v_dim * per) as u64)?;
    let kv = KvLayer {
        k: &kc,
        v: &vc,
        f16,
        capacity: total,
        window,
    };
    let (kb, vb) = (gpu.upload_f32("k", keys)?, gpu.upload_f32("v", values)?);
    let store = kernels::kv_store(gpu, h, &kv, &kb, &vb, &step(gpu, total, 0))?;
    let mut enc = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    kernels::encode(&mut enc, &[&[store]], total as u32);
    gpu.submit(enc)?;
    let qb = gpu.upload_f32("q", q)?;
    let scores = gpu.storage("scores", (n * h.n_head * total * 4) as u64)?;
    let out_len = n * h.n_head * h.head_dim_v;
    let out = gpu.storage("out", (out_len * 4) as u64)?;
    let d = kernels::attention(gpu, h, &kv, &qb, &scores, &out, &step(gpu, n, start))?;
    run(gpu, &[d], n, &out, out_len)
}

/// `silu(a) * b` ("swiglu"), `gelu_tanh(a) * b` ("geglu") or `a + b` ("add"), element-wise.
pub fn elementwise(gpu: &Gpu, entry: &str, a: &[f32], b: &[f32]) -> Result<Vec<f32>> {
    check(entry, b.len(), a.len())?;
    let (ab, bb) = (gpu.upload_f32("a", a)?, gpu.upload_f32("b", b)?);
    let st = step(gpu, 1, 0);
    let d = kernels::elementwise(gpu, entry, &ab, &bb, &st, a.len())?;
    run(gpu, &[d], 1, &ab, a.len())
}

/// RMSNorm of each head of `width = g.len()` values of `x`'s rows (gemma's q/k norms).
pub fn heads_norm(gpu: &Gpu, x: &[f32], g: &[f32], heads: usize, eps: f32) -> Result<Vec<f32>> {
    let row = g.len() * heads.max(1);
    let n = x.len() / row.max(1);
    check("heads_norm input", x.len(), n * row)?;
    let (xb, gb) = (gpu.upload_f32("x", x)?, gpu.upload_f32("g", g)?);
    let y = gpu.storage("y", (x.len() * 4) as u64)?;
    let d = kernels::heads_norm(gpu, &xb, (&gb, g.len()), &y, &step(gpu, n, 0), heads, eps)?;
    run(gpu, &[d], n, &y, x.len())
}

/// `cap * tanh(a / cap)`, element-wise (one row).
pub fn softcap(gpu: &Gpu, a: &[f32], cap: f32) -> Result<Vec<f32>> {
    let ab = gpu.upload_f32("a", a)?;
    let d = kernels::softcap(gpu, &ab, &step(gpu, 1, 0), a.len(), true, cap)?;
    run(gpu, &[d], 1, &ab, a.len())
}

/// `a * factor`, element-wise.
pub fn scale(gpu: &Gpu, a: &[f32], factor: f32) -> Result<Vec<f32>> {
    let ab = gpu.upload_f32("a", a)?;
    let d = kernels::scale(gpu, &ab, &step(gpu, 1, 0), (a.len(), true), factor)?;
    run(gpu, &[d], 1, &ab, a.len())
}
