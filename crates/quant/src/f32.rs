//! F32: one little-endian IEEE-754 single per element (a "block" of 1 element, 4 bytes).
//!
//! Byte layout of an element: `[b0, b1, b2, b3]`, `value = f32::from_le_bytes`. Rows may start at any
//! byte offset, so values are decoded from bytes rather than reinterpreted.

use crate::util::{blocks_in, blocks_out, runs_blocks};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 1;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 4;

/// Decodes `src` (4 bytes per element) into `dst`.
///
/// # Panics
/// If `src.len() != 4 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        y[0] = f32::from_le_bytes(*b);
    }
}

/// Dot product of the row `src` with `x`, accumulated in f32 in element order.
///
/// # Panics
/// If `src.len() != 4 * x.len()`.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, xs) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        sum += f32::from_le_bytes(*b) * x[0];
    }
    sum
}

/// Encodes `src` as little-endian bytes into `dst`.
///
/// # Panics
/// If `dst.len() != 4 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = x[0].to_le_bytes();
    }
}
