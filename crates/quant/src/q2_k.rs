//! Q2_K: super-blocks of 256 weights in 16 sub-blocks of 16; 2-bit quants, each sub-block with a 4-bit
//! scale and a 4-bit min, themselves scaled by the f16 super-block `d` and `dmin`.
//!
//! Block layout (84 bytes). Element `e = 128n + 32j + l` (`n` in 0..2, `j` in 0..4, `l` in 0..32):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 16 | `scales`: byte `s` holds sub-block `s`'s scale (low nibble) and min (high nibble) |
//! | 16 | 64 | `qs`: element `e` is bits `2j..2j+2` of byte `32n + l` |
//! | 80 | 2 | `d`: scale of the sub-block scales, f16 little-endian |
//! | 82 | 2 | `dmin`: scale of the sub-block mins, f16 little-endian |
//!
//! Element `e` of sub-block `s = e / 16` is `(d * sc_s) * q_e - (dmin * m_s)`, each product rounded to
//! f32 first, exactly as ggml's `dequantize_row_q2_K`.

use crate::kquant::{
    QK_K, Sweep, fit_scale_min, inverse_step, max_or_zero, quantize_scale, requantize_affine,
};
use crate::util::{
    block_struct, dequantize_affine, dot_affine, f16_to_f32, f32_to_f16, quantize_blocks,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 84;

block_struct! {
    scales: [u8; 16] @ 0,
    qs: [u8; 64] @ 16,
    d: [u8; 2] @ 80,
    dmin: [u8; 2] @ 82,
}

/// Byte of a 64-byte 2-bit array and bit shift holding element `e` (shared with Q3_K's `qs`).
#[inline(always)]
pub(crate) fn crumb_position(e: usize) -> (usize, u32) {
    (32 * (e / 128) + e % 32, 2 * ((e / 32) % 4) as u32)
}

/// Packs 256 two-bit values (element order) into 64 bytes, the inverse of [`crumb_position`].
pub(crate) fn pack_crumbs(q: &[u8; QK_K]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for (e, &v) in q.iter().enumerate() {
        let (b, s) = crumb_position(e);
        qs[b] |= (v & 3) << s;
    }
    qs
}

impl Block {
    /// Per sub-block `(d * scale, dmin * min)` as f32.
    pub fn sub_scales(&self) -> [(f32, f32); 16] {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        self.scales
            .map(|s| (d * f32::from(s & 0x0f), dmin * f32::from(s >> 4)))
    }

    /// The 256 quants (0..=3), in element order.
    pub fn quants(&self) -> [u8; QK_K] {
        std::array::from_fn(|e| {
            let (b, s) = crumb_position(e);
            (self.qs[b] >> s) & 3
        })
    }
}

/// A block's sub-block scales and quants, for [`dequantize_affine`] and [`dot_affine`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([(f32, f32); 16], [u8; QK_K]) {
    let b = Block::from_bytes(b);
    (b.sub_scales(), b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q2_K`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_affine(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per sub-block `d_s * Σ q·x - m_s * Σ x`, summed per block in
/// f32, then into an f32 total.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_affine(src, x, parts)
}

/// Quantizes one super-block: per sub-block a `(scale, min)` search minimising the `|x|`-weighted
/// absolute error, then 4-bit quantization of the scales and mins against their maxima, then the quants
/// recomputed against the rounded scales.
fn quantize_block(x: &[f32; QK_K]) -> Block {
    let sweep = Sweep {
        rmin: -0.5,
        rdelta: 0.1,
        steps: 15,
        mad: true,
    };
    let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
    let mut q = [0u8; QK_K];
    let subs = x.as_chunks::<16>().0.iter().zip(q.as_chunks_mut::<16>().0);
    for (j, (sub, l)) in subs.enumerate() {
        (scales[j], mins[j]) = fit_scale_min(sub, &sub.map(f32::abs), 3, sweep, l);
    }
    let max_scale = max_or_zero(&scales);
    let max_min = max_or_zero(&mins);
    let inv_scale = inverse_step(max_scale, 15.0);
    let inv_min = inverse_step(max_min, 15.0);
    let mut block = Block {
        scales: std::array::from_fn(|j| {
            quantize_scale(scales[j], inv_scale, 15) | (quantize_scale(mins[j], inv_min, 15) << 4)
        }),
        qs: [0; 64],
        d: f32_to_f16(max_scale / 15.0),
        dmin: f32_to_f16(max_min / 15.0),
    };
    requantize_affine(&block.sub_scales(), x, 3, &mut q);
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
