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

use crate::kquant::{QK_K, fit_symmetric_refined, requantize_symmetric, signed_max};
use crate::q2_k::{crumb_position, pack_crumbs};
use crate::util::{
    block_struct, dequantize_scaled, dot_scaled, f16_to_f32, f32_to_f16, nearest_int,
    quantize_blocks,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 110;

block_struct! {
    hmask: [u8; 32] @ 0,
    qs: [u8; 64] @ 32,
    scales: [u8; 12] @ 96,
    d: [u8; 2] @ 108,
}

impl Block {
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

/// A block's sub-block scales and quants, for [`dequantize_scaled`] and [`dot_scaled`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([f32; 16], [i8; QK_K]) {
    let b = Block::from_bytes(b);
    (b.sub_scales(), b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q3_K`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per sub-block `(d * sc) * Σ q·x`, summed per block in f32,
/// then into an f32 total.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_scaled(src, x, parts)
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
    let (_, max_scale) = signed_max(&scales);
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
    let q = requantize_symmetric(&block.sub_scales(), x, 4, &l);
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
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
