//! Fused q/k/v (`MOLLA_KDEFS=FUSEQKV`, an experiment of the persistent kernel, session 44; measured
//! 2-6% slower on an H100, so off: docs/cuda-persistent.md): layer
//! l's q/k/v rows made in layer l - 1's down step, so that a layer takes three hand-overs, not
//! four. With g layer l's attn_norm weights, x_old the residual after layer l - 1's attention and
//! h its SwiGLU output (the down step's input),
//!
//! ```text
//! qkv = s (Wqkv diag(g) x_new) + b,   x_new = x_old + Wdown h,   s = 1 / sqrt(mean(x_new^2) + eps)
//!     = s (C [x_old; h]) + b,          C = [Wqkv diag(g) | Wqkv diag(g) Wdown]
//! ```
//!
//! C is made here from the dequantized weights and stored in the W16 format below; the down step
//! dots its rows with the f32 x_old and h it holds in shared memory and hands the unscaled values
//! over, and the attention step, which polls x_new whole, applies s and the bias. C's rounding is
//! the only new error: scripts/fused_qkv_study.py measures it on the real files (float64 forward,
//! max |delta log-prob| over the top 16; docs/bench/fused-qkv-study-2026-12-05.md): W16 adds up to
//! 1.2e-3 on SmolLM2 Q4_1 and 1.0e-3 on Qwen2.5-0.5B (3e-4 and 2e-4 from B alone), where molla's
//! decode is at 5e-4 to 3e-3 and llama.cpp's at 0.09 to 0.38; f16 would add up to 1.1e-2, Q8_0 0.09.
//!
//! W16: a row of `cols` values (a multiple of 32) is its blocks' f32 scales, padded to 16 bytes,
//! then the values as i16 (each block of 32 scaled by its largest magnitude / 32767).

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch::WeightRef;
use cudarc::driver::CudaSlice;

/// The type number steps give W16 segments (kernels/persistent.cu `PK_T_W16`; past every ggml
/// type, and a bit of the kernel's type mask when it is built for fused steps).
pub(crate) const T_W16: i32 = 63;

/// Bytes of a W16 row of `cols` values.
pub(crate) fn w16_row_bytes(cols: usize) -> usize {
    w16_scale_bytes(cols) + 2 * cols
}

fn w16_scale_bytes(cols: usize) -> usize {
    (4 * (cols / 32)).next_multiple_of(16)
}

/// Encodes `row` (a multiple of 32 values) into `out` (`w16_row_bytes` bytes).
pub(crate) fn w16_encode(row: &[f32], out: &mut [u8]) {
    let sb = w16_scale_bytes(row.len());
    out.fill(0);
    for (b, blk) in row.chunks(32).enumerate() {
        let m = blk.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
        let d = (m / 32767.0) as f32;
        out[4 * b..4 * b + 4].copy_from_slice(&d.to_le_bytes());
        for (i, &v) in blk.iter().enumerate() {
            let q = if d > 0.0 {
                (f64::from(v) / f64::from(d))
                    .round()
                    .clamp(-32767.0, 32767.0) as i16
            } else {
                0
            };
            let at = sb + 2 * (32 * b + i);
            out[at..at + 2].copy_from_slice(&q.to_le_bytes());
        }
    }
}

/// Value i of a W16 row of `cols` values.
#[cfg(test)]
fn w16_value(row: &[u8], cols: usize, i: usize) -> f32 {
    let (d, q) = w16_parts(row, cols, i);
    d * f32::from(q)
}

#[cfg(test)]
fn w16_parts(row: &[u8], cols: usize, i: usize) -> (f32, i16) {
    let at = w16_scale_bytes(cols) + 2 * i;
    let b = 4 * (i / 32);
    let d = f32::from_le_bytes([row[b], row[b + 1], row[b + 2], row[b + 3]]);
    (d, i16::from_le_bytes([row[at], row[at + 1]]))
}

/// The kernel's dot of a W16 row with z = [xa; xb] (kernels/persistent.cu `pk_row_w16`), bit for
/// bit: lane l takes the groups of eight values g = l, l + 32, ..., summing each group as
/// q0 z0, then fma(q_j, z_j, .), and adding it times its block's scale with an fma; then the
/// lanes' sums added by the warp's butterfly (xor 16, 8, 4, 2, 1). (The scalar reference of the
/// kernel's walk; the device tests check the walk through whole decode steps against the CPU.)
#[cfg(test)]
fn w16_dot(row: &[u8], xa: &[f32], xb: &[f32]) -> f32 {
    let cols = xa.len() + xb.len();
    let z = |i: usize| {
        if i < xa.len() {
            xa[i]
        } else {
            xb[i - xa.len()]
        }
    };
    let mut lanes = [0f32; 32];
    for (l, acc) in lanes.iter_mut().enumerate() {
        for g in (l..cols / 8).step_by(32) {
            let (d, _) = w16_parts(row, cols, 8 * g);
            let mut s = 0f32;
            for j in 0..8 {
                let (_, q) = w16_parts(row, cols, 8 * g + j);
                s = if j == 0 {
                    f32::from(q) * z(8 * g)
                } else {
                    f32::from(q).mul_add(z(8 * g + j), s)
                };
            }
            *acc = d.mul_add(s, *acc);
        }
    }
    for off in [16, 8, 4, 2, 1] {
        let prev = lanes;
        for (l, v) in lanes.iter_mut().enumerate() {
            *v += prev[l ^ off];
        }
    }
    lanes[0]
}

/// Layer l's C (module docs) in W16 rows: q, k, v's rows of layer l (`wqkv`, each `n_embd`
/// values, dequantized), scaled by its attn_norm weights `g`, then times layer l - 1's `wdown`
/// (`n_embd` rows of `n_ff`, dequantized). Rows of n_embd + n_ff values; the product an f32 GEMM
/// (cpu::sgemm_strided: a part in 10^6 against C's rounding to W16's part in 32767 of a block),
/// the rows shared out over the machine's cores.
pub(crate) fn fused_rows(wqkv: &[f32], g: &[f32], wdown: &[f32], n_ff: usize) -> Vec<u8> {
    let n = g.len();
    let rows = wqkv.len() / n;
    let cols = n + n_ff;
    let rb = w16_row_bytes(cols);
    let mut out = vec![0u8; rows * rb];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = rows.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (ci, chunk) in out.chunks_mut(per * rb).enumerate() {
            s.spawn(move || {
                let nr = chunk.len() / rb;
                let r0 = ci * per;
                // A's rows of the chunk, then B = A Wdown.
                let a: Vec<f32> = wqkv[r0 * n..(r0 + nr) * n]
                    .chunks(n)
                    .flat_map(|w| w.iter().zip(g).map(|(&w, &gj)| w * gj))
                    .collect();
                let mut b = vec![0f32; nr * n_ff];
                cpu::sgemm_strided(
                    (nr, n, n_ff),
                    (&a, n, 1),
                    (wdown, n_ff, 1),
                    (&mut b, n_ff, 1),
                    1.0,
                );
                let mut row = vec![0f32; cols];
                for (k, dst) in chunk.chunks_mut(rb).enumerate() {
                    row[..n].copy_from_slice(&a[k * n..(k + 1) * n]);
                    row[n..].copy_from_slice(&b[k * n_ff..(k + 1) * n_ff]);
                    w16_encode(&row, dst);
                }
            });
        }
    });
    out
}

/// A layer's C on the device: `rows` W16 rows of `cols` values (x_old's `xcols`, then h's).
pub(crate) struct DevFused {
    pub rows: usize,
    pub xcols: usize,
    pub cols: usize,
    pub buf: CudaSlice<u8>,
}

impl DevFused {
    /// Makes layer `li`'s C from `model` (li >= 1) and uploads it.
    pub fn build(gpu: &Gpu, model: &model::Model, li: usize) -> Result<DevFused> {
        let (bytes, rows, xcols, cols) = fused_host(model, li)?;
        // 16 bytes of slack: the persistent kernel copies rows in whole 16-byte units.
        let mut buf = gpu.zeros(bytes.len() + 16)?;
        gpu.write(&bytes, &mut buf)?;
        Ok(DevFused {
            rows,
            xcols,
            cols,
            buf,
        })
    }

    /// The matrix as kernel arguments (as `DevMatrix::r`), of type [`T_W16`].
    pub fn r(&self, gpu: &Gpu) -> WeightRef {
        WeightRef {
            ptr: gpu.ptr(&self.buf),
            ty: T_W16,
            rows: self.rows,
            cols: self.cols,
            row_bytes: w16_row_bytes(self.cols),
        }
    }
}

/// `m` (a matrix of `file`) decoded to f32, row after row.
fn dequantized(file: &gguf::GgufFile, m: &model::Matrix) -> Result<Vec<f32>> {
    let mut v = vec![0f32; m.rows * m.cols];
    quant::dequantize(m.ty, m.bytes(file), &mut v)
        .map_err(|e| CudaError::Unsupported(format!("fused q/k/v: {}: {e}", m.name)))?;
    Ok(v)
}

/// Layer `li`'s C (li >= 1) on the host: its W16 rows, their count, x_old's width and the rows'.
fn fused_host(model: &model::Model, li: usize) -> Result<(Vec<u8>, usize, usize, usize)> {
    let (Some(l), Some(prev)) = (
        model.layers.get(li),
        li.checked_sub(1).and_then(|p| model.layers.get(p)),
    ) else {
        return Err(CudaError::Unsupported(format!(
            "fused q/k/v: no layer {li} after another"
        )));
    };
    let deq = |m: &model::Matrix| dequantized(&model.file, m);
    let n = l.attn_norm.len();
    let n_ff = prev.w_down.cols;
    let square = [&l.wq, &l.wk, &l.wv].iter().all(|m| m.cols == n) && prev.w_down.rows == n;
    if !square || n % 32 != 0 || n_ff % 32 != 0 {
        return Err(CudaError::Unsupported(format!(
            "fused q/k/v: layer {li}: widths {n} and {n_ff} (need q/k/v over the residual and multiples of 32)"
        )));
    }
    let mut wqkv = deq(&l.wq)?;
    wqkv.extend(deq(&l.wk)?);
    wqkv.extend(deq(&l.wv)?);
    let bytes = fused_rows(&wqkv, &l.attn_norm, &deq(&prev.w_down)?, n_ff);
    Ok((bytes, wqkv.len() / n, n, n + n_ff))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    #[test]
    fn w16_rows_hold_their_values_to_a_part_in_32767_of_each_block() {
        let mut s = 1;
        for cols in [32, 576 + 1536, 896 + 4864] {
            let row: Vec<f32> = (0..cols)
                .map(|i| rng(&mut s) * (1 + i % 7) as f32)
                .collect();
            let mut enc = vec![0u8; w16_row_bytes(cols)];
            w16_encode(&row, &mut enc);
            assert_eq!(w16_row_bytes(cols) % 16, 0);
            for (b, blk) in row.chunks(32).enumerate() {
                let m = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (i, &v) in blk.iter().enumerate() {
                    let got = w16_value(&enc, cols, 32 * b + i);
                    // Half a step of the block, and the f32 product's rounding.
                    let tol = m / 32767.0 * 0.5001 + m * 1.2e-7;
                    assert!((got - v).abs() <= tol, "{cols} {b} {i}");
                }
            }
        }
        let mut zero = vec![1u8; w16_row_bytes(64)];
        w16_encode(&[0.0; 64], &mut zero);
        assert!(zero.iter().all(|&b| b == 0));
    }

    #[test]
    fn the_fused_rows_are_the_product_and_the_dot_its_value() {
        // SmolLM2's widths: 576 values, 1536 in the FFN; q/k/v rows 8 of them.
        let (n, n_ff, rows) = (576, 1536, 8);
        let mut s = 3;
        let wqkv: Vec<f32> = (0..rows * n).map(|_| rng(&mut s) * 0.1).collect();
        let g: Vec<f32> = (0..n).map(|_| 1.0 + rng(&mut s)).collect();
        let wdown: Vec<f32> = (0..n * n_ff).map(|_| rng(&mut s) * 0.1).collect();
        let c = fused_rows(&wqkv, &g, &wdown, n_ff);
        let rb = w16_row_bytes(n + n_ff);
        assert_eq!(c.len(), rows * rb);
        let x_old: Vec<f32> = (0..n).map(|_| rng(&mut s) * 4.0).collect();
        let h: Vec<f32> = (0..n_ff).map(|_| rng(&mut s)).collect();
        for r in 0..rows {
            let row = &c[r * rb..(r + 1) * rb];
            // Exact: Wqkv diag(g) (x_old + Wdown h).
            let mut want = 0f64;
            for j in 0..n {
                let y: f64 = (0..n_ff)
                    .map(|k| f64::from(wdown[j * n_ff + k]) * f64::from(h[k]))
                    .sum();
                want += f64::from(wqkv[r * n + j]) * f64::from(g[j]) * (f64::from(x_old[j]) + y);
            }
            let got = f64::from(w16_dot(row, &x_old, &h));
            let size: f64 = (0..n)
                .map(|j| (f64::from(wqkv[r * n + j]) * f64::from(g[j])).abs())
                .sum::<f64>()
                * 4.0;
            assert!(
                (got - want).abs() <= 2e-4 * size,
                "row {r}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn a_models_c_is_its_next_layers_q_k_v_over_x_old_and_h() {
        use gguf::GgmlType;
        let spec = model::synth::SynthSpec {
            n_embd: 64,
            n_ff: 96,
            n_head: 4,
            n_head_kv: 2,
            ty: GgmlType::Q5_0,
            ..model::synth::SynthSpec::tiny("qwen2")
        };
        let bytes = model::synth::build(&spec).unwrap();
        let m = model::Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap()).unwrap();
        let (c, rows, n, cols) = fused_host(&m, 1).unwrap();
        let (l, prev) = (&m.layers[1], &m.layers[0]);
        assert_eq!(
            (rows, n, cols),
            (l.wq.rows + l.wk.rows + l.wv.rows, 64, 64 + 96)
        );
        let deq = |w: &model::Matrix| dequantized(&m.file, w).unwrap();
        let mut s = 9;
        let x_old: Vec<f32> = (0..n).map(|_| rng(&mut s) * 4.0).collect();
        let h: Vec<f32> = (0..96).map(|_| rng(&mut s)).collect();
        let down = deq(&prev.w_down);
        let x_new: Vec<f64> = (0..n)
            .map(|j| {
                let y: f64 = (0..96)
                    .map(|k| f64::from(down[j * 96 + k]) * f64::from(h[k]))
                    .sum();
                f64::from(x_old[j]) + y
            })
            .collect();
        let rb = w16_row_bytes(n + 96);
        let mut r = 0;
        for w in [&l.wq, &l.wk, &l.wv] {
            let wd = deq(w);
            for i in 0..w.rows {
                let want: f64 = (0..n)
                    .map(|j| f64::from(wd[i * n + j]) * f64::from(l.attn_norm[j]) * x_new[j])
                    .sum();
                let got = f64::from(w16_dot(&c[r * rb..(r + 1) * rb], &x_old, &h));
                assert!(
                    (got - want).abs() < 1e-3 * (1.0 + want.abs()),
                    "row {r}: {got} vs {want}"
                );
                r += 1;
            }
        }
        assert!(fused_host(&m, 0).is_err());
    }

    #[test]
    fn the_dot_is_the_decoded_rows_dot() {
        let mut s = 5;
        for (n, n_ff) in [(32, 32), (576, 1536), (896, 4864)] {
            let row: Vec<f32> = (0..n + n_ff).map(|_| rng(&mut s)).collect();
            let mut enc = vec![0u8; w16_row_bytes(n + n_ff)];
            w16_encode(&row, &mut enc);
            let xa: Vec<f32> = (0..n).map(|_| rng(&mut s) * 3.0).collect();
            let xb: Vec<f32> = (0..n_ff).map(|_| rng(&mut s)).collect();
            let want: f64 = (0..n + n_ff)
                .map(|i| {
                    let z = if i < n { xa[i] } else { xb[i - n] };
                    f64::from(w16_value(&enc, n + n_ff, i)) * f64::from(z)
                })
                .sum();
            let got = f64::from(w16_dot(&enc, &xa, &xb));
            assert!(
                (got - want).abs() < 1e-5 * (n + n_ff) as f64,
                "{n}+{n_ff}: {got} vs {want}"
            );
        }
    }
}
