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

use crate::kquant::{GROUP_MAX_EPS, QK_K, fit_symmetric, requantize_symmetric, signed_max};
use crate::util::{
    block_struct, dequantize_scaled, dot_scaled, f16_to_f32, f32_to_f16, nearest_int,
    quantize_blocks,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 210;

block_struct! {
    ql: [u8; 128] @ 0,
    qh: [u8; 64] @ 128,
    scales: [u8; 16] @ 192,
    d: [u8; 2] @ 208,
}

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

/// A block's sub-block scales and quants, for [`dequantize_scaled`] and [`dot_scaled`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([f32; 16], [i8; QK_K]) {
    let b = Block::from_bytes(b);
    (b.sub_scales(), b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q6_K`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled(src, dst, parts);
}

/// Dot product of the row `src` with `x`: per sub-block `(d * sc) * Σ (q - 32)·x`, summed per block in
/// f32, then into an f32 total.
///
/// # Panics
/// If `src` is not whole blocks or `x` does not hold exactly their elements.
pub fn dot(src: &[u8], x: &[f32]) -> f32 {
    dot_scaled(src, x, parts)
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
    let (max_abs, max_scale) = signed_max(&scales);
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
    let q = requantize_symmetric(&block.sub_scales(), x, 32, &l);
    (block.ql, block.qh) = Block::pack_quants(&q);
    block
}

/// Quantizes `src` (a whole number of 256-value blocks) into `dst`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
