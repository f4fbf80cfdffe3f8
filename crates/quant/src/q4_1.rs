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
    blocks_in, blocks_out, f16_to_f32, f32_to_f16, pack_nibbles, put, runs_blocks, take,
    unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 20;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            d: take(b, 0),
            m: take(b, 2),
            qs: take(b, 4),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.d);
        put(&mut b, 2, &self.m);
        put(&mut b, 4, &self.qs);
        b
    }

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
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        let b = Block::from_bytes(b);
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for (y, q) in y.iter_mut().zip(b.quants()) {
            *y = f32::from(q) * d + m;
        }
    }
}

/// Dot product of the row `src` with `x`: per block `d * Σ q_i·x_i + m * Σ x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, xs) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        let b = Block::from_bytes(b);
        let (mut sqx, mut sx) = (0.0f32, 0.0f32);
        for (q, x) in b.quants().into_iter().zip(x) {
            sqx += f32::from(q) * x;
            sx += x;
        }
        sum += f16_to_f32(b.d) * sqx + f16_to_f32(b.m) * sx;
    }
    sum
}

/// Quantizes one block as ggml's `quantize_row_q4_1_ref`: `d = (max - min) / 15`, `m = min`,
/// `q = min(15, trunc((x - min) / d + 0.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = x.map(|v| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8);
    Block {
        d: f32_to_f16(d),
        m: f32_to_f16(min),
        qs: pack_nibbles(&q),
    }
}

/// Quantizes `src` (a whole number of 32-value blocks) into `dst`, bit-exact with ggml and gguf-py.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = quantize_block(x).to_bytes();
    }
}
