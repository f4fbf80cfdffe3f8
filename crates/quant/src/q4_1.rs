//! Q4_1: blocks of 32 weights as unsigned 4-bit quants with an f16 scale and an f16 minimum.
//!
//! Block layout (20 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale, f16 little-endian |
//! | 2 | 2 | `m`: minimum (offset), f16 little-endian |
//! | 4 | 16 | `qs`: byte `j` holds quant `j` (low nibble) and quant `j + 16` (high nibble) |
//!
//! Weight `i` is `(q_i as f32) * d + m`.

use crate::util::{
    block_struct, dequantize_blocks, dot_blocks, f16_to_f32, f32_to_f16, pack_nibbles,
    quantize_blocks, unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 20;

block_struct! {
    d: [u8; 2] @ 0,
    m: [u8; 2] @ 2,
    qs: [u8; 16] @ 4,
}

impl Block {
    /// The 32 quants (0..=15), in element order.
    pub fn quants(&self) -> [u8; BLOCK_ELEMS] {
        unpack_nibbles(&self.qs)
    }
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q4_1`.
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

/// Quantizes one block as ggml's `quantize_row_q4_1_ref`: `d = (max - min) / 15`, `m = min`,
/// `q = min(15, trunc((x - min) / d + 0.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (d, min, q) = quantize_min_max(x, 15);
    Block {
        d: f32_to_f16(d),
        m: f32_to_f16(min),
        qs: pack_nibbles(&q),
    }
}

/// `y_i = q_i * d + m` for one block of Q4_1 or Q5_1 (f16 `d` and `m`).
pub(crate) fn dequantize_affine(
    d: [u8; 2],
    m: [u8; 2],
    quants: [u8; BLOCK_ELEMS],
    y: &mut [f32; BLOCK_ELEMS],
) {
    let (d, m) = (f16_to_f32(d), f16_to_f32(m));
    for (y, q) in y.iter_mut().zip(quants) {
        *y = f32::from(q) * d + m;
    }
}

/// `d * Σ q_i·x_i + m * Σ x_i` (sums in f32) for one block of Q4_1 or Q5_1.
pub(crate) fn dot_affine(
    d: [u8; 2],
    m: [u8; 2],
    quants: [u8; BLOCK_ELEMS],
    x: &[f32; BLOCK_ELEMS],
) -> f32 {
    let (mut sqx, mut sx) = (0.0f32, 0.0f32);
    for (q, x) in quants.into_iter().zip(x) {
        sqx += f32::from(q) * x;
        sx += x;
    }
    f16_to_f32(d) * sqx + f16_to_f32(m) * sx
}

/// The scale, minimum and quants (`0..=nmax`) of one block as ggml's `quantize_row_q4_1_ref`
/// (`nmax = 15`) and `quantize_row_q5_1_ref` (`nmax = 31`): `d = (max - min) / nmax`, `m = min`,
/// `q = min(nmax, trunc((x - min) / d + 0.5))`.
pub(crate) fn quantize_min_max(x: &[f32; BLOCK_ELEMS], nmax: i8) -> (f32, f32, [u8; BLOCK_ELEMS]) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / f32::from(nmax);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = x.map(|v| (((v - min) * id + 0.5) as i8).clamp(0, nmax) as u8);
    (d, min, q)
}

/// Quantizes `src` (a whole number of 32-value blocks) into `dst`, bit-exact with ggml and gguf-py.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
