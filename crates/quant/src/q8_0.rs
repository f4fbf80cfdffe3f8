//! Q8_0: blocks of 32 weights as signed 8-bit quants with one f16 scale.
//!
//! Block layout (34 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale, f16 little-endian |
//! | 2 | 32 | `qs`: quant `i` as an i8 (two's complement byte) |
//!
//! Weight `i` is `(q_i as f32) * d`.

use crate::util::{
    block_struct, dequantize_scaled, dot_scaled, f16_to_f32, f32_to_f16, quantize_blocks,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;

block_struct! {
    d: [u8; 2] @ 0,
    qs: [u8; 32] @ 2,
}

impl Block {
    /// The 32 quants (-128..=127), in element order.
    pub fn quants(&self) -> [i8; BLOCK_ELEMS] {
        self.qs.map(|q| q as i8)
    }
}

/// A block's scale (one sub-block) and quants, for [`dequantize_scaled`] and [`dot_scaled`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([f32; 1], [i8; BLOCK_ELEMS]) {
    let b = Block::from_bytes(b);
    ([f16_to_f32(b.d)], b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q8_0`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per block `d * Σ q_i·x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_scaled(src, x, parts)
}

/// Quantizes one block as ggml's `quantize_row_q8_0_ref`: `d = amax / 127`,
/// `q = round_half_away_from_zero(x / d)` (computed as `x * (1 / d)`).
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    Block {
        d: f32_to_f16(d),
        qs: x.map(|v| (v * id).round() as i8 as u8),
    }
}

/// Quantizes `src` (a whole number of 32-value blocks) into `dst`, bit-exact with ggml and gguf-py.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
