//! AVX2 q16 kernels for the K-quants with sub-blocks of 32 (super-blocks of 256): Q4_K, Q5_K.
//!
//! Quants are widened to i16 lanes in element order and multiplied with the activation quants by
//! `vpmaddwd` (exact i32 pair sums). The 8 i32 lanes of the sub-blocks of 32 are folded with
//! `vphaddd` so that four sub-blocks share one conversion to f32 and one FMA by their factors
//! `d * sc * dx` (computed for the whole super-block in one vector). The minimum terms
//! `dmin * m * sx` take one FMA per super-block in a separate accumulator. One row at a time, as in
//! `x86_legacy`. Q2_K, Q3_K and Q6_K (groups of 16) are in `x86_k16`.
//!
//! Bounds: every row kernel asserts (once per row) that the row holds `nsb` super-blocks and the
//! activations `256 * nsb` values, so super-block `sb < nsb` lies at `sb * BLOCK_BYTES` in the row
//! and its activations at `256 * sb`: the `unsafe` loads below stay in bounds whatever the caller
//! passes.

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::x86_legacy::{check, driver};
use super::{MatvecFn, Q16Acts};
use crate::simd::x86::{hsum, load_f16x2, opaque, prefetch_block};

/// The AVX2 kernel for `ty`, if this file has one.
pub(super) fn kernel_avx2(ty: GgmlType) -> Option<MatvecFn> {
    Some(match ty {
        GgmlType::Q4_K => matvec_q4_k,
        GgmlType::Q5_K => matvec_q5_k,
        _ => return None,
    })
}

driver!(matvec_q4_k, row_q4_q5_k::<false>, "avx2,fma,f16c");
driver!(matvec_q5_k, row_q4_q5_k::<true>, "avx2,fma,f16c");

/// 16 activation quants starting at `i`.
///
/// # Safety
/// `a.q` holds at least `i + 16` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn xq16(a: &Q16Acts, i: usize) -> __m256i {
    // SAFETY: the caller guarantees the 16 values are in bounds.
    unsafe { _mm256_loadu_si256(a.q.as_ptr().add(i).cast()) }
}

/// The 16 bytes at `p` zero-extended to 16 i16 lanes.
///
/// # Safety
/// `p..p + 16` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_u8(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    opaque(_mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(p.cast()) }))
}

/// The 8 six-bit scales and 8 six-bit mins of Q4_K / Q5_K (see `kquant::scale_min`) as bytes.
#[inline(always)]
fn scales_mins(s: &[u8; 12]) -> (u64, u64) {
    let u = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let (u0, u1, u2) = (u(0), u(4), u(8));
    let sc_lo = u0 & 0x3f3f_3f3f;
    let m_lo = u1 & 0x3f3f_3f3f;
    let sc_hi = (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4);
    let m_hi = ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4);
    (
        u64::from(sc_lo) | (u64::from(sc_hi) << 32),
        u64::from(m_lo) | (u64::from(m_hi) << 32),
    )
}

/// Adds a Q4_K / Q5_K super-block's sub-block sums to `acc`: `s[c]` holds `hadd` of sub-blocks `2c`
/// and `2c + 1` (8 i32 lanes each), `scale` the 8 factors `d * sc * dx`. Two more `hadd`s leave
/// sub-blocks 0..4 (then 4..8) in lanes 0..4, each split over the two 128-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce_k(s: &[__m256i; 4], scale: __m256, acc: &mut [__m256; 2]) {
    let t0 = _mm256_cvtepi32_ps(_mm256_hadd_epi32(s[0], s[1]));
    let t1 = _mm256_cvtepi32_ps(_mm256_hadd_epi32(s[2], s[3]));
    let f0 = _mm256_permute2f128_ps::<0x00>(scale, scale);
    let f1 = _mm256_permute2f128_ps::<0x11>(scale, scale);
    acc[0] = _mm256_fmadd_ps(t0, f0, acc[0]);
    acc[1] = _mm256_fmadd_ps(t1, f1, acc[1]);
}

/// Eight bytes as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bytes_f32(b: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(b as i64)))
}

/// For a Q4_K / Q5_K super-block at `p`: the 8 sub-block factors `d * sc * dx` and adds
/// `dmin * m * sx` to `accm`.
///
/// # Safety
/// `p..p + 16` is readable; `a.dx` and `a.sx` hold `8 * sb + 8` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_scales(p: *const u8, a: &Q16Acts, sb: usize, accm: &mut __m256) -> __m256 {
    // SAFETY: the caller guarantees the header bytes and the 8 per-block values.
    let (dm, s, dx, sx) = unsafe {
        (
            load_f16x2(p),
            p.add(4).cast::<[u8; 12]>().read_unaligned(),
            _mm256_loadu_ps(a.dx.as_ptr().add(8 * sb)),
            _mm256_loadu_ps(a.sx.as_ptr().add(8 * sb)),
        )
    };
    let (sc, m) = scales_mins(&s);
    let d = _mm256_broadcastss_ps(dm);
    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    *accm = _mm256_fmadd_ps(_mm256_mul_ps(dmin, bytes_f32(m)), sx, *accm);
    _mm256_mul_ps(_mm256_mul_ps(d, bytes_f32(sc)), dx)
}

/// Q4_K (`HIGH` false) and Q5_K (`HIGH`: 32 bytes of fifth bits `qh` after the scales, before `qs`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_q4_q5_k<const HIGH: bool>(row: &[u8], a: &Q16Acts) -> f32 {
    let bytes = if HIGH { 176 } else { 144 };
    let qs_at = if HIGH { 48 } else { 16 };
    let nb = check(row, a, bytes / 8);
    let nsb = nb / 8;
    let m4 = _mm256_set1_epi16(0x0f);
    let m16 = _mm256_set1_epi16(0x10);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut accm = _mm256_setzero_ps();
    for sb in 0..nsb {
        {
            // SAFETY: see the module docs.
            let p = unsafe { row.as_ptr().add(bytes * sb) };
            prefetch_block(p, bytes);
            let scale = unsafe { k_scales(p, a, sb, &mut accm) };
            // High bits, bit `s` of lane `l` for sub-block `s`, pre-shifted so bit `s` sits at 4.
            let (mut h0, mut h1) = if HIGH {
                // SAFETY: see the module docs.
                let (h0, h1) = unsafe { (widen_u8(p.add(16)), widen_u8(p.add(32))) };
                (_mm256_slli_epi16::<4>(h0), _mm256_slli_epi16::<4>(h1))
            } else {
                (_mm256_setzero_si256(), _mm256_setzero_si256())
            };
            let mut s = [_mm256_setzero_si256(); 4];
            for (c, s) in s.iter_mut().enumerate() {
                let x = 256 * sb + 64 * c;
                // SAFETY: see the module docs.
                let (v0, v1, x0, x1, x2, x3) = unsafe {
                    let q = p.add(qs_at + 32 * c);
                    (
                        widen_u8(q),
                        widen_u8(q.add(16)),
                        xq16(a, x),
                        xq16(a, x + 16),
                        xq16(a, x + 32),
                        xq16(a, x + 48),
                    )
                };
                let (mut q0, mut q1) = (_mm256_and_si256(v0, m4), _mm256_and_si256(v1, m4));
                let (mut q2, mut q3) = (_mm256_srli_epi16::<4>(v0), _mm256_srli_epi16::<4>(v1));
                if HIGH {
                    q0 = _mm256_or_si256(q0, _mm256_and_si256(h0, m16));
                    q1 = _mm256_or_si256(q1, _mm256_and_si256(h1, m16));
                    h0 = _mm256_srli_epi16::<1>(h0);
                    h1 = _mm256_srli_epi16::<1>(h1);
                    q2 = _mm256_or_si256(q2, _mm256_and_si256(h0, m16));
                    q3 = _mm256_or_si256(q3, _mm256_and_si256(h1, m16));
                    h0 = _mm256_srli_epi16::<1>(h0);
                    h1 = _mm256_srli_epi16::<1>(h1);
                }
                let s0 = _mm256_add_epi32(_mm256_madd_epi16(q0, x0), _mm256_madd_epi16(q1, x1));
                let s1 = _mm256_add_epi32(_mm256_madd_epi16(q2, x2), _mm256_madd_epi16(q3, x3));
                *s = _mm256_hadd_epi32(s0, s1);
            }
            reduce_k(&s, scale, &mut acc);
        }
    }
    hsum(_mm256_add_ps(acc[0], acc[1])) - hsum(accm)
}
