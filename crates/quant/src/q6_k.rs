//! Q6_K: super-blocks of 256 weights in 16 sub-blocks of 16; 6-bit quants around 32, each sub-block
//! with a signed 8-bit scale, scaled by the f16 super-block `d`.
//!
//! Block layout (210 bytes). Element `e = 128n + 32k + l` (`n` in 0..2, `k` in 0..4, `l` in 0..32):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 128 | `ql`: low 4 bits; element `e` is in byte `64n + 32(k % 2) + l`, low nibble for `k < 2`, high otherwise |
//! | 128 | 64 | `qh`: high 2 bits; element `e` is bits `2k..2k+2` of byte `32n + l` |
//! | 192 | 16 | `scales`: i8 scale of sub-block `e / 16` |
//! | 208 | 2 | `d`: super-block scale, f16 little-endian |
//!
//! Element `e` is `(d * sc_(e/16)) * (q_e - 32)`, the product `d * sc` rounded to f32 first, exactly as
//! ggml's `dequantize_row_q6_K`.

use crate::kquant::{GROUP_MAX_EPS, QK_K, fit_symmetric};
use crate::util::{
    blocks_in, blocks_out, f16_to_f32, f32_to_f16, nearest_int, put, runs_blocks, take,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 210;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [u8; 16],
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

/// Byte of `ql`, nibble shift, byte of `qh` and bit shift holding element `e`.
#[inline(always)]
fn position(e: usize) -> (usize, u32, usize, u32) {
    let (n, k, l) = (e / 128, (e / 32) % 4, e % 32);
    (
        64 * n + 32 * (k % 2) + l,
        4 * (k / 2) as u32,
        32 * n + l,
        2 * k as u32,
    )
}

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            ql: take(b, 0),
            qh: take(b, 128),
            scales: take(b, 192),
            d: take(b, 208),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.ql);
        put(&mut b, 128, &self.qh);
        put(&mut b, 192, &self.scales);
        put(&mut b, 208, &self.d);
        b
    }

    /// Per sub-block `d * scale` as f32.
    pub fn sub_scales(&self) -> [f32; 16] {
        let d = f16_to_f32(self.d);
        self.scales.map(|s| d * f32::from(s as i8))
    }

    /// The 256 quants minus 32 (-32..=31), in element order.
    pub fn quants(&self) -> [i8; QK_K] {
        std::array::from_fn(|e| {
            let (bl, sl, bh, sh) = position(e);
            let q = ((self.ql[bl] >> sl) & 0x0f) | (((self.qh[bh] >> sh) & 3) << 4);
            q as i8 - 32
        })
    }

    /// Packs 256 quants (0..=63, element order) into `(ql, qh)`.
    pub(crate) fn pack_quants(q: &[u8; QK_K]) -> ([u8; 128], [u8; 64]) {
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for (e, &v) in q.iter().enumerate() {
            let (bl, sl, bh, sh) = position(e);
            ql[bl] |= (v & 0x0f) << sl;
            qh[bh] |= ((v >> 4) & 3) << sh;
        }
        (ql, qh)
    }
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q6_K`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        let b = Block::from_bytes(b);
        let sub = b.sub_scales();
        for (e, (y, q)) in y.iter_mut().zip(b.quants()).enumerate() {
            *y = sub[e / 16] * f32::from(q);
        }
    }
}

/// Dot product of the row `src` with `x`: per sub-block `(d * sc) * Σ (q - 32)·x`, summed per block in
/// f32, then into an f32 total.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    let (blocks, xs) = blocks_in::<BLOCK_BYTES, BLOCK_ELEMS>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        let b = Block::from_bytes(b);
        let q = b.quants();
        let mut block = 0.0f32;
        for (j, d) in b.sub_scales().into_iter().enumerate() {
            let mut s = 0.0f32;
            for i in 16 * j..16 * j + 16 {
                s += f32::from(q[i]) * x[i];
            }
            block += d * s;
        }
        sum += block;
    }
    sum
}

/// Quantizes one super-block: a symmetric least-squares scale per sub-block of 16, the scales
/// quantized to i8 against the one of largest magnitude (which maps to -128), then the quants
/// recomputed against the rounded scales.
fn quantize_block(x: &[f32; QK_K]) -> Block {
    let mut scales = [0.0f32; 16];
    let mut l = [0i8; QK_K];
    let subs = x.as_chunks::<16>().0.iter().zip(l.as_chunks_mut::<16>().0);
    for (j, (sub, l)) in subs.enumerate() {
        scales[j] = fit_symmetric(sub, 32, l);
    }
    let (mut max_abs, mut max_scale) = (0.0f32, 0.0f32);
    for &s in &scales {
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = s;
        }
    }
    if max_abs < GROUP_MAX_EPS {
        return Block {
            ql: [0; 128],
            qh: [0; 64],
            scales: [0; 16],
            d: f32_to_f16(0.0),
        };
    }
    let iscale = -128.0 / max_scale;
    let mut block = Block {
        ql: [0; 128],
        qh: [0; 64],
        scales: scales.map(|s| nearest_int(iscale * s).clamp(-128, 127) as i8 as u8),
        d: f32_to_f16(1.0 / iscale),
    };
    // Requantize against the rounded scales, offset to 0..=63.
    let mut q = l.map(|l| (l + 32) as u8);
    for (j, d) in block.sub_scales().into_iter().enumerate() {
        if d == 0.0 {
            // The search's quants stay (as ggml leaves them); the values are 0 either way.
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            q[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as u8;
        }
    }
    (block.ql, block.qh) = Block::pack_quants(&q);
    block
}

/// Quantizes `src` (a whole number of 256-value blocks) into `dst`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (xs, blocks) = runs_blocks::<BLOCK_ELEMS, BLOCK_BYTES>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = quantize_block(x).to_bytes();
    }
}
