//! `y = x · Wᵀ` for a weight matrix kept in its file encoding and 1..N activation rows.
//! Output rows are split across the rayon pool; each worker decodes a weight row once and
//! reuses it for every activation row.

use crate::error::Result;
use crate::ops::dot_f32;
use gguf::GgufFile;
use model::Matrix;
use rayon::prelude::*;

/// Weight rows handled by one task.
const ROWS_PER_TASK: usize = 16;

/// `x` holds `n` rows of `w.cols`; `y` receives `n` rows of `w.rows`.
pub fn matmul(file: &GgufFile, w: &Matrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    debug_assert_eq!(x.len(), n * w.cols);
    debug_assert_eq!(y.len(), n * w.rows);
    if n == 1 {
        return y
            .par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .try_for_each(|(chunk, out)| {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = quant::dot(w.ty, w.row(file, chunk * ROWS_PER_TASK + i), x)?;
                }
                Ok(())
            });
    }
    // Transposed result: row r of the weight gives n consecutive outputs.
    let mut yt = vec![0.0f32; n * w.rows];
    yt.par_chunks_mut(ROWS_PER_TASK * n)
        .enumerate()
        .try_for_each(|(chunk, out)| -> Result<()> {
            let mut row = vec![0.0f32; w.cols];
            for (i, o) in out.chunks_exact_mut(n).enumerate() {
                quant::dequantize(w.ty, w.row(file, chunk * ROWS_PER_TASK + i), &mut row)?;
                for (t, v) in o.iter_mut().enumerate() {
                    *v = dot_f32(&row, &x[t * w.cols..(t + 1) * w.cols]);
                }
            }
            Ok(())
        })?;
    for r in 0..w.rows {
        for t in 0..n {
            y[t * w.rows + r] = yt[r * n + t];
        }
    }
    Ok(())
}

/// Decodes row `r` of `w` (an embedding lookup).
pub fn row(file: &GgufFile, w: &Matrix, r: usize, out: &mut [f32]) -> Result<()> {
    quant::dequantize(w.ty, w.row(file, r), out)?;
    Ok(())
}
