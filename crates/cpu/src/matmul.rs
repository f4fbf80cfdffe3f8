//! `y = x · Wᵀ` for a weight matrix kept in its file encoding and 1..N activation rows.
//!
//! Prefill (N > 4), block-quantized weights, x86 CPUs with AVX2 or AVX512-VNNI: the N activation rows are
//! quantized to 16 bits once (`quant::q16`, in parallel), then jobs of one 32-row panel each run
//! on the rayon pool; each decodes its rows into integer panels and multiplies them with all N
//! rows in the q16 integer GEMM (`quant::q16::gemm_q16`), writing its own columns of the output.
//! F32/F16/BF16 weights, Q2_K and other CPUs (NEON, scalar): each task decodes its chunk of rows to f32
//! and runs the `gemm` crate's f32 GEMM. Decode (N = 1): SIMD dot products of each weight row
//! with the activations quantized to 16 bits (~2^-16 relative error per element); N = 2..4 runs
//! that N times.

use crate::error::{CpuError, Result};
use crate::pool::{Chunks, Pool};
use gguf::GgufFile;
use model::Matrix;
use quant::q16::{self, PANEL_ROWS, Panels, Q16Acts};
use quant::simd;
use rayon::prelude::*;
use std::cell::RefCell;
use std::marker::PhantomData;
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
    let matvec_ok = |w: &&Matrix| q16::supports_q16(w.ty) || q16::supports_f32(w.ty);
    if n <= MATVEC_MAX_TOKENS && ws.iter().all(matvec_ok) {
        // Few rows (batched decode): decoding the weights for a GEMM would cost more than
        // streaming them once per row through the matvec kernels.
        let k = x.len() / n;
        for (t, xt) in x.chunks_exact(k.max(1)).enumerate() {
            let mut rows: Vec<&mut [f32]> = ys
                .iter_mut()
                .zip(ws)
                .map(|(y, w)| &mut y[t * w.rows..(t + 1) * w.rows])
                .collect();
            matvec_many(pool, file, ws, xt, &mut rows)?;
        }
        return Ok(());
    }
    let (int, float): (Vec<_>, Vec<_>) = ws
        .iter()
        .zip(ys.iter_mut())
        .partition(|(w, _)| q16::gemm_is_fast() && q16::supports_gemm(w.ty));
    if !int.is_empty() {
        let (wi, mut yi): (Vec<&Matrix>, Vec<&mut [f32]>) =
            int.into_iter().map(|(w, y)| (*w, &mut **y)).unzip();
        matmul_prefill_q16(file, &wi, x, n, &mut yi)?;
    }
    for (w, y) in float {
        matmul_prefill(file, w, x, n, y)?;
    }
    Ok(())
}

/// Up to this many activation rows run as that many matvecs: the GEMM's weight decoding (~0.4 ns
/// a weight and thread) costs about as much as four passes of the matvec kernels over the weights.
const MATVEC_MAX_TOKENS: usize = 4;

/// Activation values a parallel quantization job takes (at least).
const QUANTIZE_CHUNK: usize = 1 << 15;

/// Weight rows a prefill job decodes and multiplies: one panel (57 KB of i16 for 896 columns,
/// in L2 while all tokens pass over it). Small jobs balance the threads (q/k/v of Qwen2.5-0.5B are
/// 36 of them) at no cost: a panel is ~15 M multiply-adds for 512 tokens.
const JOB_ROWS: usize = PANEL_ROWS;

thread_local! {
    /// Each rayon thread's decoded weight panels, kept between calls.
    static PANELS: RefCell<Panels> = RefCell::new(Panels::new());
    /// The calling thread's quantized activations, kept between calls.
    static ACTS: RefCell<Q16Acts> = RefCell::new(Q16Acts::new());
}

/// Prefill with block-quantized weights (all of `ws` supported by `q16::supports_gemm`, the same
/// number of columns): q16 activations once, then integer GEMM jobs of whole panels.
fn matmul_prefill_q16(
    file: &GgufFile,
    ws: &[&Matrix],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
) -> Result<()> {
    let mut run = |acts: &mut Q16Acts| -> Result<()> {
        let threads = rayon::current_num_threads().max(1);
        let chunk = (x.len() / (2 * threads)).max(QUANTIZE_CHUNK);
        acts.quantize_split(x, chunk, |jobs| {
            jobs.into_par_iter()
                .map(|j| j.run())
                .reduce(|| true, |a, b| a & b)
        })?;
        let outs: Vec<SharedOut<'_>> = ys
            .iter_mut()
            .zip(ws)
            .map(|(y, w)| SharedOut::new(y, w.rows))
            .collect();
        let jobs: Vec<(usize, usize)> = ws
            .iter()
            .enumerate()
            .flat_map(|(i, w)| (0..w.rows).step_by(JOB_ROWS).map(move |f| (i, f)))
            .collect();
        let acts = &*acts;
        jobs.par_iter().try_for_each(|&(i, first)| -> Result<()> {
            let (w, out) = (ws[i], &outs[i]);
            let rows = JOB_ROWS.min(w.rows - first);
            PANELS.with(|cell| {
                let mut fresh = Panels::new();
                let mut held = cell.try_borrow_mut();
                let panels = match held.as_deref_mut() {
                    Ok(p) => p,
                    Err(_) => &mut fresh,
                };
                panels.decode(w.ty, w.rows_bytes(file, first, rows), w.row_bytes, w.cols)?;
                q16::gemm_q16(panels, acts, n, |t, r0, v| {
                    assert!(r0 + v.len() <= rows, "gemm wrote outside its rows");
                    // SAFETY: jobs write disjoint column ranges `first..first + rows` (asserted).
                    unsafe { out.write(t, first + r0, v) };
                })?;
                Ok(())
            })
        })
    };
    ACTS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut acts) => run(&mut acts),
        Err(_) => run(&mut Q16Acts::new()),
    })
}

/// An `n x ld` row-major output that several jobs fill at once, each its own columns.
struct SharedOut<'a> {
    ptr: *mut f32,
    len: usize,
    ld: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: `SharedOut` only writes through `write`, whose callers keep their writes disjoint.
unsafe impl Sync for SharedOut<'_> {}
// SAFETY: as above; it holds the unique borrow of the output.
unsafe impl Send for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    fn new(y: &'a mut [f32], ld: usize) -> Self {
        SharedOut {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            ld,
            _borrow: PhantomData,
        }
    }

    /// Writes `v` to row `t`, columns `col..col + v.len()`; panics if that is outside the matrix.
    ///
    /// # Safety
    /// No other thread reads or writes those elements while this runs.
    unsafe fn write(&self, t: usize, col: usize, v: &[f32]) {
        assert!(col + v.len() <= self.ld, "column out of range");
        let at = t * self.ld + col;
        assert!(at + v.len() <= self.len, "row out of range");
        // SAFETY: in bounds (asserted); exclusive by the caller's guarantee.
        unsafe {
            match <&[f32; PANEL_ROWS]>::try_from(v) {
                // A whole panel's outputs: a fixed-size copy the compiler inlines (a `memcpy`
                // call per 32 values was 2% of prefill).
                Ok(a) => self
                    .ptr
                    .add(at)
                    .cast::<[f32; PANEL_ROWS]>()
                    .write_unaligned(*a),
                Err(_) => self
                    .ptr
                    .add(at)
                    .copy_from_nonoverlapping(v.as_ptr(), v.len()),
            }
        }
    }
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
