//! AVX2 q16 kernels for the K-quants with groups of 16 (super-blocks of 256): Q2_K, Q3_K, Q6_K.
//!
//! Each half super-block (128 values) is decoded on bytes into four vectors of 32 unsigned quants
//! in element order (`Q6_K`: 0..64, `Q3_K`: quant + 4 in 0..8, `Q2_K`: 0..4), widened to i16 and
//! multiplied with the activation quants by `vpmaddwd`; `vphaddd` folds the 8 groups' lanes so that
//! four groups share one conversion to f32 and one FMA by their factors `d * sc * dx`. The offsets
//! (`32` / `4` times `Σ xq` per group, from `isum16`) and Q2_K's minimum terms take two FMAs per
//! super-block in a second accumulator. One row at a time, as in `x86_legacy`.
//!
//! Bounds: every row kernel asserts (once per row) that the row holds `nsb` super-blocks and the
//! activations `256 * nsb` values (`isum16` 16 per super-block), so the `unsafe` loads of
//! super-block `sb < nsb` stay in bounds whatever the caller passes.

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::x86_kquant::xq16;
use super::x86_legacy::{check, driver};
use super::{MatvecFn, Q16Acts};
use crate::simd::x86::{hsum, load_f16, opaque, prefetch_block};

/// The AVX2 kernel for `ty`, if this file has one.
pub(super) fn kernel_avx2(ty: GgmlType) -> Option<MatvecFn> {
    Some(match ty {
        GgmlType::Q2_K => matvec_q2_k,
        GgmlType::Q3_K => matvec_q3_k,
        GgmlType::Q6_K => matvec_q6_k,
        _ => return None,
    })
}

driver!(matvec_q2_k, row_q2_k, "avx2,fma,f16c");
driver!(matvec_q3_k, row_q3_k, "avx2,fma,f16c");
driver!(matvec_q6_k, row_q6_k, "avx2,fma,f16c");

/// The 32 bytes at `p`.
///
/// # Safety
/// `p..p + 32` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// The 32 bytes of `v` zero-extended to two vectors of 16 i16 lanes (bytes 0..16, 16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen32(v: __m256i) -> (__m256i, __m256i) {
    let v = opaque(v);
    (
        _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)),
        _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v)),
    )
}

/// Signed bytes as f32: `(bytes 0..8, bytes 8..16)` of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn i8_f32(v: __m128i) -> [__m256; 2] {
    [
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(v))),
    ]
}

/// The factors `d * sc_g * dx_(g/2)` of super-block `sb`'s 16 groups (0..8, 8..16), from the group
/// scales `sc` as f32 and the super-block scale `d`.
///
/// # Safety
/// `a.dx` holds `8 * sb + 8` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn factors(d: __m256, sc: [__m256; 2], a: &Q16Acts, sb: usize) -> [__m256; 2] {
    // SAFETY: the caller guarantees the 8 steps are in bounds.
    let dx = unsafe { _mm256_loadu_ps(a.dx.as_ptr().add(8 * sb)) };
    let lo = _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    let hi = _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    [
        _mm256_mul_ps(_mm256_mul_ps(d, sc[0]), lo),
        _mm256_mul_ps(_mm256_mul_ps(d, sc[1]), hi),
    ]
}

/// `acc += Σ_g f_g * isum16_g` over super-block `sb`'s 16 groups.
///
/// # Safety
/// `a.isum16` holds `16 * sb + 16` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_sums(f: [__m256; 2], a: &Q16Acts, sb: usize, acc: &mut __m256) {
    // SAFETY: the caller guarantees the 16 sums are in bounds.
    let (s0, s1) = unsafe {
        let p = a.isum16.as_ptr().add(16 * sb);
        (
            _mm256_loadu_si256(p.cast()),
            _mm256_loadu_si256(p.add(8).cast()),
        )
    };
    *acc = _mm256_fmadd_ps(f[0], _mm256_cvtepi32_ps(s0), *acc);
    *acc = _mm256_fmadd_ps(f[1], _mm256_cvtepi32_ps(s1), *acc);
}

/// Adds half `n` of super-block `sb`: `q[k]` holds the 32 unsigned quants of values
/// `128 n + 32 k ..`, `f` the factors of its 8 groups.
///
/// # Safety
/// `a.q` holds `256 * sb + 128 * (n + 1)` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half(
    q: [__m256i; 4],
    a: &Q16Acts,
    sb: usize,
    n: usize,
    f: __m256,
    acc: &mut [__m256; 2],
) {
    let mut g = [_mm256_setzero_si256(); 4];
    for (k, (q, g)) in q.into_iter().zip(&mut g).enumerate() {
        let x = 256 * sb + 128 * n + 32 * k;
        // SAFETY: the caller guarantees these 32 values are in bounds.
        let (x0, x1) = unsafe { (xq16(a, x), xq16(a, x + 16)) };
        let (q0, q1) = widen32(q);
        *g = _mm256_hadd_epi32(_mm256_madd_epi16(q0, x0), _mm256_madd_epi16(q1, x1));
    }
    // Lanes: groups 0..4 (then 4..8) of the half, each split over the two 128-bit halves.
    let t0 = _mm256_cvtepi32_ps(_mm256_hadd_epi32(g[0], g[1]));
    let t1 = _mm256_cvtepi32_ps(_mm256_hadd_epi32(g[2], g[3]));
    let f0 = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3));
    let f1 = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7));
    acc[0] = _mm256_fmadd_ps(t0, f0, acc[0]);
    acc[1] = _mm256_fmadd_ps(t1, f1, acc[1]);
}

/// The row loop shared by the three formats: `sb_fn(p, a, sb, acc, acco)` adds super-block `sb` at
/// `p`; the result is `Σ acc - k * Σ acco`.
macro_rules! k16_row {
    ($name:ident, $bytes:literal, $k:expr, $sb_fn:ident) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $name(row: &[u8], a: &Q16Acts) -> f32 {
            let nb = check(row, a, $bytes / 8);
            let mut acc = [_mm256_setzero_ps(); 2];
            let mut acco = _mm256_setzero_ps();
            for sb in 0..nb / 8 {
                // SAFETY: see the module docs.
                let p = unsafe { row.as_ptr().add($bytes * sb) };
                prefetch_block(p, $bytes);
                // SAFETY: see the module docs.
                unsafe { $sb_fn(p, a, sb, &mut acc, &mut acco) };
            }
            hsum(_mm256_add_ps(acc[0], acc[1])) - $k * hsum(acco)
        }
    };
}

k16_row!(row_q6_k, 210, 32.0, sb_q6_k);
k16_row!(row_q3_k, 110, 4.0, sb_q3_k);
k16_row!(row_q2_k, 84, 1.0, sb_q2_k);

/// Q6_K super-block `sb` at `p`: quants 0..64, offset 32 (`acco` gets `Σ f * isum16`).
///
/// # Safety
/// `p..p + 210` is readable; `a` holds super-block `sb`'s activations.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sb_q6_k(p: *const u8, a: &Q16Acts, sb: usize, acc: &mut [__m256; 2], acco: &mut __m256) {
    let (m4, m3) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    // SAFETY: the caller guarantees the block and activations are in bounds.
    unsafe {
        let d = _mm256_broadcastss_ps(load_f16(p.add(208)));
        let f = factors(d, i8_f32(_mm_loadu_si128(p.add(192).cast())), a, sb);
        group_sums(f, a, sb, acco);
        for (n, f) in f.into_iter().enumerate() {
            let (ql0, ql1) = (load32(p.add(64 * n)), load32(p.add(64 * n + 32)));
            let qh = load32(p.add(128 + 32 * n));
            let lo = |v: __m256i| _mm256_and_si256(v, m4);
            let hi = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
            let q = [
                _mm256_or_si256(lo(ql0), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m3)),
                _mm256_or_si256(lo(ql1), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m3)),
                _mm256_or_si256(hi(ql0), _mm256_and_si256(qh, m3)),
                _mm256_or_si256(hi(ql1), _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3)),
            ];
            half(q, a, sb, n, f, acc);
        }
    }
}

/// Q3_K super-block `sb` at `p`: quants + 4 in 0..8, offset 4, scales `sc - 32`.
///
/// # Safety
/// `p..p + 110` is readable; `a` holds super-block `sb`'s activations.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sb_q3_k(p: *const u8, a: &Q16Acts, sb: usize, acc: &mut [__m256; 2], acco: &mut __m256) {
    let (m3, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
    // SAFETY: the caller guarantees the block and activations are in bounds.
    unsafe {
        let s = p.add(96).cast::<[u8; 12]>().read_unaligned();
        let u = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
        let (a0, a1, t) = (u(0), u(4), u(8));
        let (lo4, hi2) = (0x0f0f_0f0f, 0x0303_0303);
        let sc = [
            (a0 & lo4) | ((t & hi2) << 4),
            (a1 & lo4) | (((t >> 2) & hi2) << 4),
            ((a0 >> 4) & lo4) | (((t >> 4) & hi2) << 4),
            ((a1 >> 4) & lo4) | (((t >> 6) & hi2) << 4),
        ];
        let sc = _mm_sub_epi8(
            _mm_setr_epi32(sc[0] as i32, sc[1] as i32, sc[2] as i32, sc[3] as i32),
            _mm_set1_epi8(32),
        );
        let d = _mm256_broadcastss_ps(load_f16(p.add(108)));
        let f = factors(d, i8_f32(sc), a, sb);
        group_sums(f, a, sb, acco);
        let hm = load32(p);
        for (n, f) in f.into_iter().enumerate() {
            let ql = load32(p.add(32 + 32 * n));
            let q: [__m256i; 4] = std::array::from_fn(|j| {
                let shift = _mm_cvtsi32_si128(2 * j as i32);
                let low = _mm256_and_si256(_mm256_srl_epi16(ql, shift), m3);
                let bit = _mm256_set1_epi8(1 << (4 * n + j));
                let high = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                _mm256_or_si256(low, _mm256_and_si256(high, four))
            });
            half(q, a, sb, n, f, acc);
        }
    }
}

/// Q2_K super-block `sb` at `p`: quants 0..4 with 4-bit scales and mins (`acco` gets the minimum
/// terms `dmin * m * dx * isum16`).
///
/// # Safety
/// `p..p + 84` is readable; `a` holds super-block `sb`'s activations.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sb_q2_k(p: *const u8, a: &Q16Acts, sb: usize, acc: &mut [__m256; 2], acco: &mut __m256) {
    let m3 = _mm256_set1_epi8(3);
    // SAFETY: the caller guarantees the block and activations are in bounds.
    unsafe {
        let s = _mm_loadu_si128(p.cast());
        let m4 = _mm_set1_epi8(0x0f);
        let sc = _mm_and_si128(s, m4);
        let mn = _mm_and_si128(_mm_srli_epi16::<4>(s), m4);
        let d = _mm256_broadcastss_ps(load_f16(p.add(80)));
        let dmin = _mm256_broadcastss_ps(load_f16(p.add(82)));
        let f = factors(d, i8_f32(sc), a, sb);
        group_sums(factors(dmin, i8_f32(mn), a, sb), a, sb, acco);
        for (n, f) in f.into_iter().enumerate() {
            let ql = load32(p.add(16 + 32 * n));
            let q: [__m256i; 4] = std::array::from_fn(|j| {
                let shift = _mm_cvtsi32_si128(2 * j as i32);
                _mm256_and_si256(_mm256_srl_epi16(ql, shift), m3)
            });
            half(q, a, sb, n, f, acc);
        }
    }
}
