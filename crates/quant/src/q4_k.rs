//! Q4_K: super-blocks of 256 weights in 8 sub-blocks of 32; 4-bit quants, each sub-block with a 6-bit
//! scale and a 6-bit min, themselves scaled by the f16 super-block `d` and `dmin`.
//!
//! Block layout (144 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale of the sub-block scales, f16 little-endian |
//! | 2 | 2 | `dmin`: scale of the sub-block mins, f16 little-endian |
//! | 4 | 12 | `scales`: 8 six-bit scales and 8 six-bit mins, packed (see `kquant::scale_min`) |
//! | 16 | 128 | `qs`: for chunk `c` in 0..4, byte `32c + l` holds element `64c + l` (low nibble) and `64c + 32 + l` (high nibble) |
//!
//! Element `e` of sub-block `s = e / 32` is `(d * sc_s) * q_e - (dmin * m_s)`, each product rounded to f32
//! first, exactly as ggml's `dequantize_row_q4_K`.

use crate::kquant::{QK_K, Sweep, quantize_six_bit, six_bit_sub_scales};
use crate::util::{block_struct, dequantize_affine, dot_affine, quantize_blocks};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 144;

block_struct! {
    d: [u8; 2] @ 0,
    dmin: [u8; 2] @ 2,
    scales: [u8; 12] @ 4,
    qs: [u8; 128] @ 16,
}

impl Block {
    /// Per sub-block `(d * scale, dmin * min)` as f32.
    pub fn sub_scales(&self) -> [(f32, f32); 8] {
        six_bit_sub_scales(self.d, self.dmin, &self.scales)
    }

    /// The 256 quants (0..=15), in element order.
    pub fn quants(&self) -> [u8; QK_K] {
        let mut q = [0u8; QK_K];
        for (e, v) in q.iter_mut().enumerate() {
            let b = self.qs[32 * (e / 64) + e % 32];
            *v = if e % 64 < 32 { b & 0x0f } else { b >> 4 };
        }
        q
    }

    /// Packs 256 quants (0..=15, element order) into `qs`.
    pub(crate) fn pack_quants(q: &[u8; QK_K]) -> [u8; 128] {
        let mut qs = [0u8; 128];
        for c in 0..4 {
            for l in 0..32 {
                qs[32 * c + l] = (q[64 * c + l] & 0x0f) | ((q[64 * c + 32 + l] & 0x0f) << 4);
            }
        }
        qs
    }
}

/// A block's sub-block scales and quants, for [`dequantize_affine`] and [`dot_affine`].
fn parts(b: &[u8; BLOCK_BYTES]) -> ([(f32, f32); 8], [u8; QK_K]) {
    let b = Block::from_bytes(b);
    (b.sub_scales(), b.quants())
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q4_K`.
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

/// Quantizes one super-block: per sub-block a weighted `(scale, min)` search (weights `rms + |x|`),
/// then 6-bit quantization of the scales and mins against their maxima, then the quants recomputed
/// against the rounded scales (see `kquant::quantize_six_bit`).
fn quantize_block(x: &[f32; QK_K]) -> Block {
    let sweep = Sweep {
        rmin: -1.0,
        rdelta: 0.1,
        steps: 20,
        mad: false,
    };
    let (d, dmin, scales, q) = quantize_six_bit(x, 15, sweep);
    Block {
        d,
        dmin,
        scales,
        qs: Block::pack_quants(&q),
    }
}

/// Quantizes `src` (a whole number of 256-value blocks) into `dst`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not exactly their bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x| quantize_block(x).to_bytes());
}
