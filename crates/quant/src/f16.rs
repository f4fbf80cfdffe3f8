//! F16: one little-endian IEEE-754 half per element (a "block" of 1 element, 2 bytes).
//!
//! Byte layout of an element: `[b0, b1]`, `value = f16::from_le_bytes` widened exactly to f32.
//! Quantization rounds to nearest, ties to even (numpy's `astype(float16)`, ggml's `GGML_FP32_TO_FP16`);
//! values beyond ±65504 (after rounding) become ±infinity.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::util::{blocks_in, blocks_out, runs_blocks};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 1;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 2;

/// Elements widened per batch: half's slice conversion uses F16C when the CPU has it.
const CHUNK: usize = 64;

/// Widens up to [`CHUNK`] little-endian halves into `out[..src.len()]` (exact).
#[inline(always)]
fn widen(src: &[[u8; 2]], out: &mut [f32]) {
    let mut h = [f16::ZERO; CHUNK];
    for (h, b) in h.iter_mut().zip(src) {
        *h = f16::from_le_bytes(*b);
    }
    h[..src.len()].convert_to_f32_slice(&mut out[..src.len()]);
}

/// Widens `src` (2 bytes per element) into `dst`.
///
/// # Panics
/// If `src.len() != 2 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.chunks(CHUNK).zip(dst.chunks_mut(CHUNK)) {
        widen(b, y);
    }
}

/// Dot product of the row `src` with `x`, accumulated in f32 in element order.
/// (Widened in batches of 64; the sum is the same as element by element.)
///
/// # Panics
/// If `src.len() != 2 * x.len()`.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, _) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut w = [0.0f32; CHUNK];
    let mut sum = 0.0f32;
    for (b, x) in blocks.chunks(CHUNK).zip(x.chunks(CHUNK)) {
        widen(b, &mut w);
        for (w, x) in w.iter().zip(x) {
            sum += w * x;
        }
    }
    sum
}

/// Rounds `src` to f16 (nearest, ties to even) into `dst`.
///
/// # Panics
/// If `dst.len() != 2 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (_, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    let mut h = [f16::ZERO; CHUNK];
    for (x, b) in src.chunks(CHUNK).zip(blocks.chunks_mut(CHUNK)) {
        h[..x.len()].convert_from_f32_slice(x);
        for (b, h) in b.iter_mut().zip(h) {
            *b = h.to_le_bytes();
        }
    }
}
