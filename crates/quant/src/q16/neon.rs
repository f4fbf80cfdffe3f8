//! NEON (AArch64) q16 kernels for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K: quants widened to i16, exact
//! i32 products with `smlal`, one FMA per block (Q6_K: per group of 16) by `d * dx`. One row at a
//! time, kept simple: they compile here but only run on ARM machines, where the tests cover them.
//!
//! Blocks are walked as fixed-size arrays (`as_chunks`), so each weight load is inside one block;
//! activation loads are inside `a.q`, whose length each kernel asserts once.

use std::arch::aarch64::*;

use gguf::GgmlType;

use super::{MatvecFn, Q16Acts};

/// The NEON kernel for `ty`, if there is one.
pub(super) fn kernel(ty: GgmlType) -> Option<MatvecFn> {
    Some(match ty {
        GgmlType::Q4_0 => matvec_q4_0,
        GgmlType::Q4_1 => matvec_q4_1,
        GgmlType::Q5_0 => matvec_q5_0,
        GgmlType::Q8_0 => matvec_q8_0,
        GgmlType::Q4_K => matvec_q4_k,
        GgmlType::Q6_K => matvec_q6_k,
        _ => return None,
    })
}

macro_rules! rows {
    ($name:ident, $dot:ident) => {
        #[target_feature(enable = "neon")]
        fn $name(rows: &[u8], row_bytes: usize, a: &Q16Acts, y: &mut [f32]) {
            assert!(row_bytes > 0 && a.q.len() == 32 * a.dx.len());
            for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
                *y = $dot(row, a);
            }
        }
    };
}

rows!(matvec_q4_0, dot_q4_0);
rows!(matvec_q4_1, dot_q4_1);
rows!(matvec_q5_0, dot_q5_0);
rows!(matvec_q8_0, dot_q8_0);
rows!(matvec_q4_k, dot_q4_k);
rows!(matvec_q6_k, dot_q6_k);

fn f16(b: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(b).to_f32()
}

/// 16 bytes at `b[at..]`.
#[inline]
#[target_feature(enable = "neon")]
fn load16<const N: usize>(b: &[u8; N], at: usize) -> uint8x16_t {
    assert!(at + 16 <= N);
    // SAFETY: `at + 16 <= N` bytes of the array.
    unsafe { vld1q_u8(b.as_ptr().add(at)) }
}

/// `Σ q·xq` over 16 signed quants and the 16 activation quants from `i`, into 4 i32 lanes.
#[inline]
#[target_feature(enable = "neon")]
fn dot16(acc: int32x4_t, q: int8x16_t, a: &Q16Acts, i: usize) -> int32x4_t {
    let x = &a.q[i..i + 16];
    // SAFETY: `x` holds 16 values.
    let (x0, x1) = unsafe { (vld1q_s16(x.as_ptr()), vld1q_s16(x.as_ptr().add(8))) };
    let (q0, q1) = (vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q));
    let acc = vmlal_s16(acc, vget_low_s16(q0), vget_low_s16(x0));
    let acc = vmlal_high_s16(acc, q0, x0);
    let acc = vmlal_s16(acc, vget_low_s16(q1), vget_low_s16(x1));
    vmlal_high_s16(acc, q1, x1)
}

/// `Σ q·xq` over one block of 32: `lo` holds elements 0..16, `hi` 16..32.
#[inline]
#[target_feature(enable = "neon")]
fn dot32(lo: int8x16_t, hi: int8x16_t, a: &Q16Acts, i: usize) -> int32x4_t {
    dot16(dot16(vdupq_n_s32(0), lo, a, i), hi, a, i + 16)
}

/// The low and high nibbles of 16 bytes, as signed bytes.
#[inline]
#[target_feature(enable = "neon")]
fn nibbles(q: uint8x16_t) -> (int8x16_t, int8x16_t) {
    (
        vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))),
        vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)),
    )
}

#[target_feature(enable = "neon")]
fn dot_q4_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let k8 = vdupq_n_s8(8);
    for (b, blk) in row.as_chunks::<18>().0.iter().enumerate() {
        let (lo, hi) = nibbles(load16(blk, 2));
        let s = dot32(vsubq_s8(lo, k8), vsubq_s8(hi, k8), a, 32 * b);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), f16([blk[0], blk[1]]) * a.dx[b]);
    }
    vaddvq_f32(acc)
}

#[target_feature(enable = "neon")]
fn dot_q4_1(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let mut mins = 0.0f32;
    for (b, blk) in row.as_chunks::<20>().0.iter().enumerate() {
        let (lo, hi) = nibbles(load16(blk, 4));
        let s = dot32(lo, hi, a, 32 * b);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), f16([blk[0], blk[1]]) * a.dx[b]);
        mins += f16([blk[2], blk[3]]) * a.sx[b];
    }
    vaddvq_f32(acc) + mins
}

/// `0x10` in byte `j` where bit `j` of the 16-bit `h` is set.
#[inline]
#[target_feature(enable = "neon")]
fn bits16(h: u32) -> int8x16_t {
    let bytes = vcombine_u8(vdup_n_u8(h as u8), vdup_n_u8((h >> 8) as u8));
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: BIT holds 16 bytes.
    let bit = unsafe { vld1q_u8(BIT.as_ptr()) };
    vreinterpretq_s8_u8(vandq_u8(vtstq_u8(bytes, bit), vdupq_n_u8(0x10)))
}

#[target_feature(enable = "neon")]
fn dot_q5_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let k16 = vdupq_n_s8(16);
    for (b, blk) in row.as_chunks::<22>().0.iter().enumerate() {
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let (lo, hi) = nibbles(load16(blk, 6));
        let lo = vsubq_s8(vorrq_s8(lo, bits16(qh)), k16);
        let hi = vsubq_s8(vorrq_s8(hi, bits16(qh >> 16)), k16);
        let s = dot32(lo, hi, a, 32 * b);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), f16([blk[0], blk[1]]) * a.dx[b]);
    }
    vaddvq_f32(acc)
}

#[target_feature(enable = "neon")]
fn dot_q8_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    for (b, blk) in row.as_chunks::<34>().0.iter().enumerate() {
        let lo = vreinterpretq_s8_u8(load16(blk, 2));
        let hi = vreinterpretq_s8_u8(load16(blk, 18));
        let s = dot32(lo, hi, a, 32 * b);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), f16([blk[0], blk[1]]) * a.dx[b]);
    }
    vaddvq_f32(acc)
}

#[target_feature(enable = "neon")]
fn dot_q4_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let mut mins = 0.0f32;
    for (sb, blk) in row.as_chunks::<144>().0.iter().enumerate() {
        let b = crate::q4_k::Block::from_bytes(blk);
        let sub = b.sub_scales();
        for c in 0..4 {
            let (l0, h0) = nibbles(load16(blk, 16 + 32 * c));
            let (l1, h1) = nibbles(load16(blk, 32 + 32 * c));
            for (s, lo, hi) in [(2 * c, l0, l1), (2 * c + 1, h0, h1)] {
                let blk32 = 8 * sb + s;
                let i = dot32(lo, hi, a, 32 * blk32);
                acc = vfmaq_n_f32(acc, vcvtq_f32_s32(i), sub[s].0 * a.dx[blk32]);
                mins += sub[s].1 * a.sx[blk32];
            }
        }
    }
    vaddvq_f32(acc) - mins
}

#[target_feature(enable = "neon")]
fn dot_q6_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let (m4, m3, k32) = (vdupq_n_u8(0x0f), vdupq_n_u8(3), vdupq_n_s8(32));
    for (sb, blk) in row.as_chunks::<210>().0.iter().enumerate() {
        let sub = crate::q6_k::Block::from_bytes(blk).sub_scales();
        for n in 0..2 {
            for k in 0..4 {
                for h in 0..2 {
                    let ql = load16(blk, 64 * n + 32 * (k % 2) + 16 * h);
                    let nib = if k < 2 {
                        vandq_u8(ql, m4)
                    } else {
                        vshrq_n_u8::<4>(ql)
                    };
                    let qh = load16(blk, 128 + 32 * n + 16 * h);
                    let shift = vdupq_n_s8(-(2 * k as i8));
                    let hb = vshlq_n_u8::<4>(vandq_u8(vshlq_u8(qh, shift), m3));
                    let q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(nib, hb)), k32);
                    let g = 8 * n + 2 * k + h;
                    let i = dot16(vdupq_n_s32(0), q, a, 256 * sb + 16 * g);
                    let f = sub[g] * a.dx[8 * sb + g / 2];
                    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(i), f);
                }
            }
        }
    }
    vaddvq_f32(acc)
}
