//! `y = x · Wᵀ` for a weight matrix kept in its file encoding and 1..N activation rows.
//!
//! Prefill (N > 1): output rows are split across the rayon pool in chunks; each task decodes its
//! chunk of weight rows to f32 once and multiplies it with all N activation rows through
//! the `gemm` crate's blocked f32 GEMM. Decode (N = 1): SIMD dot products of each weight row with
//! the activations quantized to 16 bits (`quant::q16`, ~2^-16 relative error per element).

use crate::error::{CpuError, Result};
use crate::pool::{Chunks, Pool};
use gguf::GgufFile;
use model::Matrix;
use quant::q16::{self, Q16Acts};
use quant::simd;
use rayon::prelude::*;
use std::sync::Mutex;

/// Prefill tasks per thread: enough to balance, few enough that the activations are not
/// re-packed by sgemm too often (each task packs all N rows once).
const PREFILL_TASKS_PER_THREAD: usize = 1;
/// Decode tasks per thread (all matrices of one region together).
const DECODE_TASKS_PER_THREAD: usize = 2;

/// `x` holds `n` rows of `w.cols`; `y` receives `n` rows of `w.rows`.
pub fn matmul(
    pool: &Pool,
    file: &GgufFile,
    w: &Matrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<()> {
    matmul_many(pool, file, &[w], x, n, &mut [y])
}

/// Several matrices with the same input width applied to the same activations (q/k/v, gate/up)
/// in one parallel region; `ys[i]` receives `n` rows of `ws[i].rows`.
pub fn matmul_many(
    pool: &Pool,
    file: &GgufFile,
    ws: &[&Matrix],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
) -> Result<()> {
    for (w, y) in ws.iter().zip(ys.iter()) {
        debug_assert_eq!(x.len(), n * w.cols);
        debug_assert_eq!(y.len(), n * w.rows);
    }
    if n == 1 {
        return matvec_many(pool, file, ws, x, ys);
    }
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        matmul_prefill(file, w, x, n, y)?;
    }
    Ok(())
}

/// Decode: one activation row. Quantized weights use the q16 kernels (activations quantized to
/// 16 bits once per call); F32/F16/BF16 weights the exact f32 kernels.
fn matvec_many(
    pool: &Pool,
    file: &GgufFile,
    ws: &[&Matrix],
    x: &[f32],
    ys: &mut [&mut [f32]],
) -> Result<()> {
    let mut acts = Q16Acts::new();
    if ws.iter().any(|w| q16::supports_q16(w.ty)) {
        acts.quantize(x)?;
    }
    let tasks = pool.threads() * DECODE_TASKS_PER_THREAD;
    let total: usize = ws.iter().map(|w| w.rows).sum();
    let chunk = total.div_ceil(tasks).next_multiple_of(8);
    let mut work: Vec<Mutex<(&Matrix, usize, &mut [f32])>> = Vec::new();
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        for (i, out) in y.chunks_mut(chunk).enumerate() {
            work.push(Mutex::new((w, i * chunk, out)));
        }
    }
    let next = Chunks::new(work.len(), 1);
    let failure: Mutex<Option<CpuError>> = Mutex::new(None);
    pool.run(&|_| {
        while let Some(r) = next.claim() {
            // Each task is claimed by exactly one thread, so its lock is never contended.
            let mut task = work[r.start].lock().unwrap_or_else(|e| e.into_inner());
            let (w, first, ref mut out) = *task;
            let rows = w.rows_bytes(file, first, out.len());
            let done = if q16::supports_q16(w.ty) {
                q16::matvec_q16(w.ty, rows, w.row_bytes, &acts, out)
            } else {
                q16::matvec_f32(w.ty, rows, w.row_bytes, x, out)
            };
            if let Err(e) = done {
                *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.into());
            }
        }
    });
    match failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Prefill: N activation rows against decoded chunks of weight rows through sgemm.
fn matmul_prefill(file: &GgufFile, w: &Matrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    let tasks = rayon::current_num_threads() * PREFILL_TASKS_PER_THREAD;
    let chunk_rows = w.rows.div_ceil(tasks).next_multiple_of(16);
    let firsts: Vec<usize> = (0..w.rows).step_by(chunk_rows).collect();
    // Each task: (n x rows) outputs for its weight rows, copied into place afterwards.
    let blocks: Vec<Vec<f32>> = firsts
        .par_iter()
        .map_init(Vec::new, |buf: &mut Vec<f32>, &first| -> Result<Vec<f32>> {
            let rows = chunk_rows.min(w.rows - first);
            buf.resize(rows * w.cols, 0.0);
            simd::dequantize_fast(w.ty, w.rows_bytes(file, first, rows), buf)?;
            let mut c = vec![0.0f32; n * rows];
            sgemm_strided(
                (n, w.cols, rows),
                (x, w.cols, 1),
                (buf, 1, w.cols),
                (&mut c, rows, 1),
                1.0,
            );
            Ok(c)
        })
        .collect::<Result<_>>()?;
    for (&first, c) in firsts.iter().zip(&blocks) {
        let rows = c.len() / n;
        for (t, src) in c.chunks_exact(rows).enumerate() {
            y[t * w.rows + first..][..rows].copy_from_slice(src);
        }
    }
    Ok(())
}

/// `c (m×n) = alpha · a (m×k) · b (k×n)` with explicit (row, column) strides for each matrix,
/// given as (slice starting at element 0, row stride, column stride). Panics if a stride
/// pattern would reach past its slice.
pub fn sgemm_strided(
    (m, k, n): (usize, usize, usize),
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    (c, rsc, csc): (&mut [f32], usize, usize),
    alpha: f32,
) {
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| {
        if rows == 0 || cols == 0 {
            0
        } else {
            (rows - 1) * rs + (cols - 1) * cs + 1
        }
    };
    assert!(a.len() >= last(m, k, rsa, csa), "sgemm: a too short");
    assert!(b.len() >= last(k, n, rsb, csb), "sgemm: b too short");
    assert!(c.len() >= last(m, n, rsc, csc), "sgemm: c too short");
    // SAFETY: the asserts bound every element gemm reads or writes through these pointers
    // and strides; c is a unique borrow, so it does not alias a or b.
    unsafe {
        gemm_f32::gemm::f32::get_gemm_fn()(
            m,
            n,
            k,
            c.as_mut_ptr(),
            csc as isize,
            rsc as isize,
            false,
            a.as_ptr(),
            csa as isize,
            rsa as isize,
            b.as_ptr(),
            csb as isize,
            rsb as isize,
            0.0,
            alpha,
            false,
            false,
            false,
            gemm_common::Parallelism::None,
        );
    }
}

/// Decodes row `r` of `w` (an embedding lookup).
pub fn row(file: &GgufFile, w: &Matrix, r: usize, out: &mut [f32]) -> Result<()> {
    quant::dequantize(w.ty, w.row(file, r), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sgemm_strided;

    #[test]
    fn sgemm_strided_matches_naive() {
        let (m, n, k) = (5, 7, 33);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 * 0.5).collect();
        let mut c = vec![0.0; m * n];
        // b given as n rows of k: read as k x n with row stride 1, column stride k.
        sgemm_strided((m, k, n), (&a, k, 1), (&b, 1, k), (&mut c, n, 1), 1.0);
        for i in 0..m {
            for j in 0..n {
                let e: f32 = (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum();
                assert!((c[i * n + j] - e).abs() < 1e-3, "{i},{j}");
            }
        }
    }
}
