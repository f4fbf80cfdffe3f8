//! Q3_K: super-blocks of 256 weights in 16 sub-blocks of 16; 3-bit signed quants, each sub-block with
//! a 6-bit signed scale, scaled by the f16 super-block `d`.
//!
//! Block layout (110 bytes). Element `e = 128n + 32j + l` (`n` in 0..2, `j` in 0..4, `l` in 0..32):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 32 | `hmask`: bit `e / 32` of byte `e % 32` is the high bit of element `e` |
//! | 32 | 64 | `qs`: low 2 bits; element `e` is bits `2j..2j+2` of byte `32n + l` (as Q2_K) |
//! | 96 | 12 | `scales`: 16 six-bit scales: low 4 bits of scale `s` in byte `s % 8` (nibble `s / 8`), high 2 bits in byte `8 + s % 4` (bits `2(s / 4)..`) |
//! | 108 | 2 | `d`: super-block scale, f16 little-endian |
//!
//! The quant is `low2 - 4` when the high bit is clear and `low2` when it is set (-4..=3); the sub-block
//! scale is `sc - 32`. Element `e` is `(d * (sc_(e/16) - 32)) * q_e`, exactly as ggml's
//! `dequantize_row_q3_K`.

use crate::kquant::{QK_K, fit_symmetric_refined};
use crate::q2_k::{crumb_position, pack_crumbs};
use crate::util::{
    blocks_in, blocks_out, f16_to_f32, f32_to_f16, nearest_int, put, runs_blocks, take,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 110;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            hmask: take(b, 0),
            qs: take(b, 32),
            scales: take(b, 96),
            d: take(b, 108),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.hmask);
        put(&mut b, 32, &self.qs);
        put(&mut b, 96, &self.scales);
        put(&mut b, 108, &self.d);
        b
    }

    /// The 16 six-bit sub-block scales minus 32 (-32..=31).
    pub fn scales(&self) -> [i8; 16] {
        std::array::from_fn(|s| {
            let low = (self.scales[s % 8] >> (4 * (s / 8))) & 0x0f;
            let high = (self.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            (low | (high << 4)) as i8 - 32
        })
    }

    /// Packs 16 six-bit scales (0..=63, i.e. already offset by 32).
    pub(crate) fn pack_scales(ls: &[u8; 16]) -> [u8; 12] {
        let mut out = [0u8; 12];
        for (s, &v) in ls.iter().enumerate() {
            out[s % 8] |= (v & 0x0f) << (4 * (s / 8));
            out[8 + s % 4] |= ((v >> 4) & 3) << (2 * (s / 4));
        }
        out
    }

    /// Per sub-block `d * (scale - 32)` as f32.
    pub fn sub_scales(&self) -> [f32; 16] {
        let d = f16_to_f32(self.d);
        self.scales().map(|s| d * f32::from(s))
    }

    /// The 256 quants (-4..=3), in element order.
    pub fn quants(&self) -> [i8; QK_K] {
        std::array::from_fn(|e| {
            let (b, s) = crumb_position(e);
            let low = ((self.qs[b] >> s) & 3) as i8;
            let high = (self.hmask[e % 32] >> (e / 32)) & 1;
            if high == 0 { low - 4 } else { low }
        })
    }
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q3_K`.
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

/// Dot product of the row `src` with `x`: per sub-block `(d * sc) * Σ q·x`, summed per block in f32,
/// then into an f32 total.
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

/// Quantizes one super-block: a refined symmetric least-squares scale per sub-block of 16, the scales
/// quantized to 6 bits against the one of largest magnitude (which maps to -32), then the quants
/// recomputed against the rounded scales.
fn quantize_block(x: &[f32; QK_K]) -> Block {
    let mut scales = [0.0f32; 16];
    let mut l = [0i8; QK_K];
    let subs = x.as_chunks::<16>().0.iter().zip(l.as_chunks_mut::<16>().0);
    for (j, (sub, l)) in subs.enumerate() {
        scales[j] = fit_symmetric_refined(sub, 4, l);
    }
    let (mut max_abs, mut max_scale) = (0.0f32, 0.0f32);
    for &s in &scales {
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = s;
        }
    }
    let mut block = Block {
        hmask: [0; 32],
        qs: [0; 64],
        scales: [0; 12],
        d: f32_to_f16(0.0),
    };
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        let ls = scales.map(|s| (nearest_int(iscale * s).clamp(-32, 31) + 32) as u8);
        block.scales = Block::pack_scales(&ls);
        block.d = f32_to_f16(1.0 / iscale);
    }
    // Requantize against the rounded scales, offset by 4 (0..=7): bit 2 goes to `hmask`, bits 0..2
    // to `qs`.
    let mut q = l.map(|l| (l + 4) as u8);
    for (j, d) in block.sub_scales().into_iter().enumerate() {
        if d == 0.0 {
            // The search's quants stay (as ggml leaves them); the values are 0 either way.
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            q[i] = (nearest_int(x[i] / d).clamp(-4, 3) + 4) as u8;
        }
    }
    for (e, &v) in q.iter().enumerate() {
        block.hmask[e % 32] |= ((v >> 2) & 1) << (e / 32);
    }
    block.qs = pack_crumbs(&q);
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
