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

use crate::util::{blocks_in, blocks_out, f16_to_f32, f32_to_f16, put, runs_blocks, take};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub d: [u8; 2],
    pub qs: [u8; 32],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            d: take(b, 0),
            qs: take(b, 2),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.d);
        put(&mut b, 2, &self.qs);
        b
    }

    /// The 32 quants (-128..=127), in element order.
    pub fn quants(&self) -> [i8; BLOCK_ELEMS] {
        self.qs.map(|q| q as i8)
    }
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q8_0`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        let b = Block::from_bytes(b);
        let d = f16_to_f32(b.d);
        for (y, q) in y.iter_mut().zip(b.quants()) {
            *y = f32::from(q) * d;
        }
    }
}

/// Dot product of the row `src` with `x`: per block `d * Σ q_i·x_i` in f32, summed in f32.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, xs) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        let b = Block::from_bytes(b);
        let mut s = 0.0f32;
        for (q, x) in b.quants().into_iter().zip(x) {
            s += f32::from(q) * x;
        }
        sum += f16_to_f32(b.d) * s;
    }
    sum
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
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = quantize_block(x).to_bytes();
    }
}
