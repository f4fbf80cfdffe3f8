//! Q4_0: blocks of 32 weights as 4-bit quants around 8 with one f16 scale.
//!
//! Block layout (18 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale, f16 little-endian |
//! | 2 | 16 | `qs`: byte `j` holds quant `j` (low nibble) and quant `j + 16` (high nibble) |
//!
//! Weight `i` is `((q_i - 8) as f32) * d`.

use crate::kquant::signed_max;
use crate::util::{
    block_struct, dequantize_scaled, dot_scaled, f16_to_f32, f32_to_f16, pack_nibbles,
    quantize_blocks, unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;

block_struct! {
    d: [u8; 2] @ 0,
    qs: [u8; 16] @ 2,
}

impl Block {
    /// The 32 quants minus 8 (-8..=7), in element order.
    pub fn quants(&self) -> [i8; BLOCK_ELEMS] {
        unpack_nibbles(&self.qs).map(|q| q as i8 - 8)
    }
}

/// A block's scale (one sub-block) and quants, for [`dequantize_scaled`] and [`dot_scaled`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([f32; 1], [i8; BLOCK_ELEMS]) {
    let b = Block::from_bytes(b);
    ([f16_to_f32(b.d)], b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q4_0`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per block `d * Σ (q_i - 8)·x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_scaled(src, x, parts)
}

/// Quantizes one block as ggml's `quantize_row_q4_0_ref`: the value of largest magnitude (first one on
/// ties) maps to quant 0, `d = max / -8`, `q = min(15, trunc(x / d + 8.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (d, q) = quantize_around(x, 8);
    Block {
        d: f32_to_f16(d),
        qs: pack_nibbles(&q),
    }
}

/// The scale and quants (`0..2k`, around `k`) of one block as ggml's `quantize_row_q4_0_ref` (`k = 8`)
/// and `quantize_row_q5_0_ref` (`k = 16`): the value of largest magnitude (first one on ties) maps to
/// quant 0, `d = max / -k`, `q = min(2k - 1, trunc(x / d + k + 0.5))`.
pub(crate) fn quantize_around(x: &[f32; BLOCK_ELEMS], k: i8) -> (f32, [u8; BLOCK_ELEMS]) {
    let (_, max) = signed_max(x);
    let d = max / -f32::from(k);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = x.map(|v| ((v * id + (f32::from(k) + 0.5)) as i8).clamp(0, 2 * k - 1) as u8);
    (d, q)
}

/// Quantizes `src` (a whole number of 32-value blocks) into `dst`, bit-exact with ggml and gguf-py.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
