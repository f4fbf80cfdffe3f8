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

use crate::util::{
    add_high_bits, blocks_in, blocks_out, f16_to_f32, f32_to_f16, pack_high_bits, pack_nibbles,
    put, runs_blocks, take, unpack_nibbles,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 22;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            d: take(b, 0),
            qh: take(b, 2),
            qs: take(b, 6),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.d);
        put(&mut b, 2, &self.qh);
        put(&mut b, 6, &self.qs);
        b
    }

    /// The 32 quants minus 16 (-16..=15), in element order.
    pub fn quants(&self) -> [i8; BLOCK_ELEMS] {
        let mut q = unpack_nibbles(&self.qs);
        add_high_bits(&mut q, self.qh);
        q.map(|q| q as i8 - 16)
    }
}

/// Dequantizes whole blocks `src` into `dst` (32 values per block), as ggml's `dequantize_row_q5_0`.
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

/// Dot product of the row `src` with `x`: per block `d * Σ (q_i - 16)·x_i` in f32, summed in f32.
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

/// Quantizes one block as ggml's `quantize_row_q5_0_ref`: the value of largest magnitude (first one on
/// ties) maps to quant 0, `d = max / -16`, `q = min(31, trunc(x / d + 16.5))`.
fn quantize_block(x: &[f32; BLOCK_ELEMS]) -> Block {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = x.map(|v| ((v * id + 16.5) as i8).clamp(0, 31) as u8);
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
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = quantize_block(x).to_bytes();
    }
}
