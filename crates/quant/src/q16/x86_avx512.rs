//! AVX-512 (F/BW/VL/VNNI, on 256-bit vectors) q16 kernels where they beat the AVX2 ones on Zen 4:
//! Q5_0 and Q5_1, whose high bits a mask register applies in one instruction per 16 values (10-15%
//! faster). `vpdpwssd` (fusing `vpmaddwd` + `vpaddd`) alone gained nothing for Q4_1 or Q4_K, and
//! 512-bit vectors run as two 256-bit halves on Zen 4, so the other formats keep their AVX2 kernels.
//! Same structure and bounds argument as `x86_legacy` (each row kernel asserts its lengths).

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::x86_legacy::{accumulate, alternate, check, driver, finish, load_xq};
use super::{MatvecFn, Q16Acts};
use crate::simd::x86::{load_f16, load_f16x2, opaque, prefetch_block};

/// The AVX-512 kernel for `ty`, if this file has one.
pub(super) fn kernel(ty: GgmlType) -> Option<MatvecFn> {
    Some(match ty {
        GgmlType::Q5_0 => matvec_q5_0,
        GgmlType::Q5_1 => matvec_q5_1,
        _ => return None,
    })
}

driver!(
    matvec_q5_0,
    row_q5_0,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
);
driver!(
    matvec_q5_1,
    row_q5_1,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
);

/// The 16 bytes at `p` zero-extended to 16 i16 lanes.
///
/// # Safety
/// `p..p + 16` is readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn widen_u8(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    opaque(_mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(p.cast()) }))
}

/// `Σ lo·x0 + hi·x1` in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn madd2(lo: __m256i, hi: __m256i, x0: __m256i, x1: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(_mm256_madd_epi16(lo, x0), hi, x1)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_q5_0(row: &[u8], a: &Q16Acts) -> f32 {
    let nb = check(row, a, 22);
    let m4 = _mm256_set1_epi16(0x0f);
    let s16 = _mm256_set1_epi16(16);
    let mut acc = [_mm256_setzero_ps(); 2];
    alternate(nb, |b, k| {
        // SAFETY: see the module docs.
        let ((x0, x1), v, qh, d) = unsafe {
            let p = row.as_ptr().add(22 * b);
            prefetch_block(p, 22);
            let qh = p.add(2).cast::<u32>().read_unaligned();
            (load_xq(a, b), widen_u8(p.add(6)), qh, load_f16(p))
        };
        // q - 16: subtract 16 where the high bit is clear.
        let lo = _mm256_and_si256(v, m4);
        let hi = _mm256_srli_epi16::<4>(v);
        let lo = _mm256_mask_sub_epi16(lo, !qh as u16, lo, s16);
        let hi = _mm256_mask_sub_epi16(hi, !(qh >> 16) as u16, hi, s16);
        accumulate(
            &mut acc[k],
            madd2(lo, hi, x0, x1),
            _mm_mul_ss(d, _mm_set_ss(a.dx[b])),
        );
    });
    finish(acc, [_mm_setzero_ps(); 2])
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_q5_1(row: &[u8], a: &Q16Acts) -> f32 {
    let nb = check(row, a, 24);
    let m4 = _mm256_set1_epi16(0x0f);
    let s16 = _mm256_set1_epi16(16);
    let (mut acc, mut accm) = ([_mm256_setzero_ps(); 2], [_mm_setzero_ps(); 2]);
    alternate(nb, |b, k| {
        // SAFETY: see the module docs.
        let ((x0, x1), v, qh, dm) = unsafe {
            let p = row.as_ptr().add(24 * b);
            prefetch_block(p, 24);
            let qh = p.add(4).cast::<u32>().read_unaligned();
            (load_xq(a, b), widen_u8(p.add(8)), qh, load_f16x2(p))
        };
        let lo = _mm256_and_si256(v, m4);
        let hi = _mm256_srli_epi16::<4>(v);
        let lo = _mm256_mask_add_epi16(lo, qh as u16, lo, s16);
        let hi = _mm256_mask_add_epi16(hi, (qh >> 16) as u16, hi, s16);
        let dm = _mm_mul_ps(
            dm,
            _mm_unpacklo_ps(_mm_set_ss(a.dx[b]), _mm_set_ss(a.sx[b])),
        );
        accm[k] = _mm_add_ps(accm[k], dm);
        accumulate(&mut acc[k], madd2(lo, hi, x0, x1), dm);
    });
    finish(acc, accm)
}
