//! Q5_K: super-blocks of 256 weights in 8 sub-blocks of 32; 5-bit quants, each sub-block with a 6-bit
//! scale and a 6-bit min, themselves scaled by the f16 super-block `d` and `dmin`.
//!
//! Block layout (176 bytes):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 2 | `d`: scale of the sub-block scales, f16 little-endian |
//! | 2 | 2 | `dmin`: scale of the sub-block mins, f16 little-endian |
//! | 4 | 12 | `scales`: 8 six-bit scales and 8 six-bit mins, packed as in Q4_K |
//! | 16 | 32 | `qh`: bit `e / 32` of byte `e % 32` is bit 4 of element `e` |
//! | 48 | 128 | `qs`: low 4 bits, as Q4_K's `qs` (byte `32c + l`: elements `64c + l` low, `64c + 32 + l` high) |
//!
//! Element `e` of sub-block `s = e / 32` is `(d * sc_s) * q_e - (dmin * m_s)`, each product rounded to f32
//! first, exactly as ggml's `dequantize_row_q5_K`.

use crate::kquant::{
    QK_K, Sweep, fit_scale_min, max_or_zero, pack_scale_mins, quantize_scale, scale_min,
};
use crate::util::{
    blocks_in, blocks_out, f16_to_f32, f32_to_f16, nearest_int, put, runs_blocks, take,
};

/// Elements per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 176;

/// One block, field by field (see the module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

const _: () = assert!(size_of::<Block>() == BLOCK_BYTES);

impl Block {
    /// Reads a block from its bytes.
    pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
        Self {
            d: take(b, 0),
            dmin: take(b, 2),
            scales: take(b, 4),
            qh: take(b, 16),
            qs: take(b, 48),
        }
    }

    /// The block's bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        put(&mut b, 0, &self.d);
        put(&mut b, 2, &self.dmin);
        put(&mut b, 4, &self.scales);
        put(&mut b, 16, &self.qh);
        put(&mut b, 48, &self.qs);
        b
    }

    /// Per sub-block `(d * scale, dmin * min)` as f32.
    pub fn sub_scales(&self) -> [(f32, f32); 8] {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        std::array::from_fn(|j| {
            let (sc, m) = scale_min(j, &self.scales);
            (d * f32::from(sc), dmin * f32::from(m))
        })
    }

    /// The 256 quants (0..=31), in element order.
    pub fn quants(&self) -> [u8; QK_K] {
        let mut q = [0u8; QK_K];
        for (e, v) in q.iter_mut().enumerate() {
            let b = self.qs[32 * (e / 64) + e % 32];
            let low = if e % 64 < 32 { b & 0x0f } else { b >> 4 };
            let high = (self.qh[e % 32] >> (e / 32)) & 1;
            *v = low | (high << 4);
        }
        q
    }

    /// Packs 256 quants (0..=31, element order) into `(qh, qs)`.
    pub(crate) fn pack_quants(q: &[u8; QK_K]) -> ([u8; 32], [u8; 128]) {
        let (mut qh, mut qs) = ([0u8; 32], [0u8; 128]);
        for (e, &v) in q.iter().enumerate() {
            let low = v & 0x0f;
            qs[32 * (e / 64) + e % 32] |= if e % 64 < 32 { low } else { low << 4 };
            qh[e % 32] |= ((v >> 4) & 1) << (e / 32);
        }
        (qh, qs)
    }
}

/// Dequantizes whole blocks `src` into `dst` (256 values per block), as ggml's `dequantize_row_q5_K`.
///
/// # Panics
/// If `src` is not whole blocks or `dst` does not hold exactly their elements.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_out::<BLOCK_BYTES, BLOCK_ELEMS>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        let b = Block::from_bytes(b);
        let sub = b.sub_scales();
        for (e, (y, q)) in y.iter_mut().zip(b.quants()).enumerate() {
            let (d, m) = sub[e / 32];
            *y = d * f32::from(q) - m;
        }
    }
}

/// Dot product of the row `src` with `x`: per sub-block `d_s * Σ q·x - m_s * Σ x`, summed per block in
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
        for (j, (d, m)) in b.sub_scales().into_iter().enumerate() {
            let (mut sqx, mut sx) = (0.0f32, 0.0f32);
            for i in 32 * j..32 * j + 32 {
                sqx += f32::from(q[i]) * x[i];
                sx += x[i];
            }
            block += d * sqx - m * sx;
        }
        sum += block;
    }
    sum
}

/// Quantizes one super-block: per sub-block a weighted `(scale, min)` search (weights `rms + |x|`),
/// then 6-bit quantization of the scales and mins against their maxima, then the quants recomputed
/// against the rounded scales.
fn quantize_block(x: &[f32; QK_K]) -> Block {
    let sweep = Sweep {
        rmin: -0.5,
        rdelta: 0.1,
        steps: 15,
        mad: false,
    };
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let mut q = [0u8; QK_K];
    let subs = x.as_chunks::<32>().0.iter().zip(q.as_chunks_mut::<32>().0);
    for (j, (sub, l)) in subs.enumerate() {
        let rms = (sub.iter().map(|v| v * v).sum::<f32>() / 32.0).sqrt();
        let w = sub.map(|v| rms + v.abs());
        (scales[j], mins[j]) = fit_scale_min(sub, &w, 31, sweep, l);
    }
    let max_scale = max_or_zero(&scales);
    let max_min = max_or_zero(&mins);
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls = scales.map(|s| quantize_scale(s, inv_scale, 63));
    let lm = mins.map(|m| quantize_scale(m, inv_min, 63));
    let mut block = Block {
        d: f32_to_f16(max_scale / 63.0),
        dmin: f32_to_f16(max_min / 63.0),
        scales: pack_scale_mins(&ls, &lm),
        qh: [0; 32],
        qs: [0; 128],
    };
    // Requantize against the rounded scales.
    for (j, (d, m)) in block.sub_scales().into_iter().enumerate() {
        if d == 0.0 {
            // The search's quants stay (as ggml leaves them); the values are `-m` either way.
            continue;
        }
        for i in 32 * j..32 * j + 32 {
            q[i] = nearest_int((x[i] + m) / d).clamp(0, 31) as u8;
        }
    }
    (block.qh, block.qs) = Block::pack_quants(&q);
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
