//! BF16: the upper 16 bits of an f32, little-endian (a "block" of 1 element, 2 bytes).
//!
//! Byte layout of an element: `[b0, b1]`; `value = f32::from_bits((u16::from_le_bytes([b0, b1]) as u32) << 16)`.
//! Quantization follows ggml's `ggml_compute_fp32_to_bf16`: NaN keeps its upper bits and is forced quiet
//! (bit 6 of the result set), everything else rounds to nearest, ties to even, overflowing to infinity.

use crate::util::{blocks_in, blocks_out, runs_blocks};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 1;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 2;

/// Widens one bf16 (little-endian bytes) to f32 exactly.
#[inline(always)]
pub fn to_f32(b: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16)
}

/// Rounds one f32 to bf16 as ggml does and returns its little-endian bytes.
#[inline(always)]
pub fn from_f32(v: f32) -> [u8; 2] {
    let u = v.to_bits();
    let h = if u & 0x7fff_ffff > 0x7f80_0000 {
        (u >> 16) | 64
    } else {
        // At most 0xff80_0000 + 0x8000 here (NaN patterns took the other branch): fits 16 bits.
        ((u64::from(u) + 0x7fff + u64::from((u >> 16) & 1)) >> 16) as u32
    };
    (h as u16).to_le_bytes()
}

/// Widens `src` (2 bytes per element) into `dst`.
///
/// # Panics
/// If `src.len() != 2 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        y[0] = to_f32(*b);
    }
}

/// Dot product of the row `src` with `x`, accumulated in f32 in element order.
///
/// # Panics
/// If `src.len() != 2 * x.len()`.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, xs) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        sum += to_f32(*b) * x[0];
    }
    sum
}

/// Rounds `src` to bf16 into `dst`.
///
/// # Panics
/// If `dst.len() != 2 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = from_f32(x[0]);
    }
}
