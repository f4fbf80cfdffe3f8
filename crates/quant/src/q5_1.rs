//! Q5_1: blocks of 32 weights as unsigned 5-bit quants with an f16 scale and an f16 minimum.
//!
//! Block layout (24 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale, f16 little-endian |
//! | 2 | 2 | `m`: minimum (offset), f16 little-endian |
//! | 4 | 4 | `qh`: little-endian u32, bit `i` is bit 4 of quant `i` |
//! | 8 | 16 | `qs`: byte `j` holds the low 4 bits of quant `j` (low nibble) and quant `j + 16` (high) |
//!
//! Weight `i` is `(q_i as f32) * d + m`.

use crate::q4_1::{dequantize_affine, dot_affine, quantize_min_max};
use crate::util::{
    add_high_bits, block_struct, dequantize_blocks, dot_blocks, f32_to_f16, pack_high_bits,
    pack_nibbles, quantize_blocks, unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 24;

block_struct! {
    d: [u8; 2] @ 0,
    m: [u8; 2] @ 2,
    qh: [u8; 4] @ 4,
    qs: [u8; 16] @ 8,
}

impl Block {
    /// The 32 quants (0..=31), in element order.
    pub fn quants(&self) -> [u8; BLOCK_ELEMS] {
        let mut q = unpack_nibbles(&self.qs);
        add_high_bits(&mut q, self.qh);
        q
    }
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q5_1`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b, y: &mut [f32; BLOCK_ELEMS]| {
        let b = Block::from_bytes(b);
        dequantize_affine(b.d, b.m, b.quants(), y);
    });
}

/// Dot product of the row `src` with `x`: per block `d * Σ q_i·x_i + m * Σ x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_blocks(src, x, |b, x: &[f32; BLOCK_ELEMS]| {
        let b = Block::from_bytes(b);
        dot_affine(b.d, b.m, b.quants(), x)
    })
}

/// Quantizes one block as ggml's `quantize_row_q5_1_ref`: `d = (max - min) / 31`, `m = min`,
/// `q = min(31, trunc((x - min) / d + 0.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (d, min, q) = quantize_min_max(x, 31);
    Block {
        d: f32_to_f16(d),
        m: f32_to_f16(min),
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
