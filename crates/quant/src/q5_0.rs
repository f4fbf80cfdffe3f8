//! Q5_0: blocks of 32 weights as 5-bit quants around 16 with one f16 scale.
//!
//! Block layout (22 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale, f16 little-endian |
//! | 2 | 4 | `qh`: little-endian u32, bit `i` is bit 4 of quant `i` |
//! | 6 | 16 | `qs`: byte `j` holds the low 4 bits of quant `j` (low nibble) and quant `j + 16` (high) |
//!
//! Weight `i` is `((q_i - 16) as f32) * d`.

use crate::q4_0::quantize_around;
use crate::util::{
    add_high_bits, block_struct, dequantize_scaled, dot_scaled, f16_to_f32, f32_to_f16,
    pack_high_bits, pack_nibbles, quantize_blocks, unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 22;

block_struct! {
    d: [u8; 2] @ 0,
    qh: [u8; 4] @ 2,
    qs: [u8; 16] @ 6,
}

impl Block {
    /// The 32 quants minus 16 (-16..=15), in element order.
    pub fn quants(&self) -> [i8; BLOCK_ELEMS] {
        let mut q = unpack_nibbles(&self.qs);
        add_high_bits(&mut q, self.qh);
        q.map(|q| q as i8 - 16)
    }
}

/// A block's scale (one sub-block) and quants, for [`dequantize_scaled`] and [`dot_scaled`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([f32; 1], [i8; BLOCK_ELEMS]) {
    let b = Block::from_bytes(b);
    ([f16_to_f32(b.d)], b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q5_0`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per block `d * Σ (q_i - 16)·x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_scaled(src, x, parts)
}

/// Quantizes one block as ggml's `quantize_row_q5_0_ref`: the value of largest magnitude (first one on
/// ties) maps to quant 0, `d = max / -16`, `q = min(31, trunc(x / d + 16.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (d, q) = quantize_around(x, 16);
    Block {
        d: f32_to_f16(d),
        qh: pack_high_bits(&q),
        qs: pack_nibbles(&q),
    }
}

/// Quantizes `src` (a whole number of 32-value blocks) into `dst`, bit-exact with ggml and gguf-py.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
