//! AVX2 q16 kernels for the 32-weight formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Each block's quants are widened to i16 lanes in element order and multiplied with the activation
//! quants by `vpmaddwd` (exact i32 pair sums); the 8 i32 lanes are converted to f32 and accumulated
//! with one FMA by `d * dx`. Formats with a minimum add `m * sx` in a second accumulator; those with an
//! offset subtract `offset * Σ xq` from the integer sums. Consecutive blocks alternate between two
//! sets of accumulators, so a block never waits for the previous block's FMA.
//!
//! One row at a time: on the Zen 4 dev machine, interleaving 2 or 4 rows (to load each block of
//! activations once for all of them) was 10-20% faster on cached weights but read 100+ MB matrices
//! from DRAM at only 6-8 GB/s, against 14-17 GB/s single-threaded (~25 GB/s with two threads, the
//! machine's streaming bandwidth) one row at a time with software prefetch. Decode streams every
//! matrix from DRAM, so one row wins.
//!
//! Bounds: every row kernel asserts, once per row, that the row holds `nb` blocks and the activations
//! `32 * nb` values (`nb = a.dx.len()`), so the `unsafe` loads of block `b < nb` (at
//! `b * BLOCK_BYTES` in the row, `32 * b` in `a.q`) stay in bounds whatever the caller passes.

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::{MatvecFn, Q16Acts};
use crate::simd::x86::{hsum, load_f16, load_f16x2, opaque, prefetch_block};

/// The AVX2 kernel for `ty`, if this file has one.
pub(super) fn kernel_avx2(ty: GgmlType) -> Option<MatvecFn> {
    Some(match ty {
        GgmlType::Q4_0 => matvec_q4_0,
        GgmlType::Q4_1 => matvec_q4_1,
        GgmlType::Q5_0 => matvec_q5_0,
        GgmlType::Q5_1 => matvec_q5_1,
        GgmlType::Q8_0 => matvec_q8_0,
        _ => return None,
    })
}

/// A matvec kernel `$name` running the row kernel `$row(row, a) -> f32` on each row.
macro_rules! driver {
    ($name:ident, $row:expr, $feat:literal) => {
        #[target_feature(enable = $feat)]
        fn $name(rows: &[u8], row_bytes: usize, a: &Q16Acts, y: &mut [f32]) {
            assert!(row_bytes > 0);
            for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
                *y = $row(row, a);
            }
        }
    };
}
pub(super) use driver;

/// Asserts what a row kernel's raw loads rely on (the row holds `nb` blocks of `block_bytes` per 32
/// values, the activations `32 * nb` values and their sums); returns `nb`, the number of 32-value
/// blocks.
#[inline(always)]
pub(super) fn check(row: &[u8], a: &Q16Acts, block_bytes: usize) -> usize {
    let nb = a.dx.len();
    assert!(
        row.len() >= nb * block_bytes
            && a.q.len() >= 32 * nb
            && a.sx.len() >= nb
            && a.isum16.len() >= 2 * nb
    );
    nb
}

/// Runs `f(b, k)` for every block `b < nb`, alternating `k` between 0 and 1 so that two sets of
/// accumulators take turns.
#[inline(always)]
pub(super) fn alternate(nb: usize, mut f: impl FnMut(usize, usize)) {
    let mut b = 0;
    while b + 2 <= nb {
        f(b, 0);
        f(b + 1, 1);
        b += 2;
    }
    if b < nb {
        f(b, 0);
    }
}

/// The 32 activation quants of block `b` as two vectors of 16.
///
/// # Safety
/// `a.q` holds at least `32 * (b + 1)` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_xq(a: &Q16Acts, b: usize) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees the 32 values are in bounds.
    unsafe {
        let p = a.q.as_ptr().add(32 * b).cast::<__m256i>();
        (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)))
    }
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

/// `Σ lo·x0 + hi·x1` in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn madd2(lo: __m256i, hi: __m256i, x0: __m256i, x1: __m256i) -> __m256i {
    _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1))
}

/// `k * Σ xq` of one block, spread over 8 i32 lanes (the offset correction).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn offset_sum(k: i16, x0: __m256i, x1: __m256i) -> __m256i {
    madd2(_mm256_set1_epi16(k), _mm256_set1_epi16(k), x0, x1)
}

/// The row's result from its two sets of accumulators; the minimum terms ride in lane 1 of `accm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn finish(acc: [__m256; 2], accm: [__m128; 2]) -> f32 {
    let m = _mm_add_ps(accm[0], accm[1]);
    hsum(_mm256_add_ps(acc[0], acc[1])) + _mm_cvtss_f32(_mm_movehdup_ps(m))
}

/// `acc += cvt(s) * broadcast(lane 0 of sc)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn accumulate(acc: &mut __m256, s: __m256i, sc: __m128) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcastss_ps(sc), *acc);
}

/// 16 i16 lanes of `16 * bit` for bit `j` of the 16-bit `h` (lane `j`), from two table rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn high_bits16(h: u32) -> __m256i {
    let lo = &HIGH_BIT_16[(h & 0xff) as usize];
    let hi = &HIGH_BIT_16[((h >> 8) & 0xff) as usize];
    // SAFETY: both are 16-byte table rows.
    unsafe { _mm256_loadu2_m128i(hi.as_ptr().cast(), lo.as_ptr().cast()) }
}

/// `HIGH_BIT_16[b][j] = 16 * ((b >> j) & 1)`: bit 4 of eight quants from one byte of `qh`.
static HIGH_BIT_16: [[i16; 8]; 256] = {
    let mut t = [[0i16; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut j = 0;
        while j < 8 {
            t[b][j] = 16 * ((b >> j) & 1) as i16;
            j += 1;
        }
        b += 1;
    }
    t
};

driver!(matvec_q4_0, row_q4_q5::<false, false>, "avx2,fma,f16c");
driver!(matvec_q4_1, row_q4_q5::<true, false>, "avx2,fma,f16c");
driver!(matvec_q5_0, row_q4_q5::<false, true>, "avx2,fma,f16c");
driver!(matvec_q5_1, row_q4_q5::<true, true>, "avx2,fma,f16c");
driver!(matvec_q8_0, row_q8_0, "avx2,fma,f16c");

/// `acc += cvt(s) * d * dx` and `accm += [d * dx, m * sx]` for block `b` of a format with a minimum
/// (`dm` holds `[d, m]` in lanes 0 and 1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn accumulate_min(
    acc: &mut __m256,
    accm: &mut __m128,
    s: __m256i,
    dm: __m128,
    a: &Q16Acts,
    b: usize,
) {
    // Lane 0: d * dx; lane 1: m * sx.
    let dm = _mm_mul_ps(
        dm,
        _mm_unpacklo_ps(_mm_set_ss(a.dx[b]), _mm_set_ss(a.sx[b])),
    );
    *accm = _mm_add_ps(*accm, dm);
    accumulate(acc, s, dm);
}

/// Q4_0 (`MIN`, `HIGH` false), Q4_1 (`MIN`), Q5_0 (`HIGH`) and Q5_1 (both): an f16 `d`, with `MIN`
/// an f16 `m` after it, with `HIGH` a 32-bit `qh` of fifth bits, then 16 bytes of nibbles. Without
/// `MIN` the quants are offset by 8 (Q4_0) or 16 (Q5_0).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_q4_q5<const MIN: bool, const HIGH: bool>(row: &[u8], a: &Q16Acts) -> f32 {
    let qh_at = if MIN { 4 } else { 2 };
    let qs_at = if HIGH { qh_at + 4 } else { qh_at };
    let bytes = qs_at + 16;
    let nb = check(row, a, bytes);
    let m4 = _mm256_set1_epi16(0x0f);
    let (mut acc, mut accm) = ([_mm256_setzero_ps(); 2], [_mm_setzero_ps(); 2]);
    alternate(nb, |b, k| {
        // SAFETY: see the module docs.
        let ((x0, x1), v, qh, p) = unsafe {
            let p = row.as_ptr().add(bytes * b);
            prefetch_block(p, bytes);
            let qh = if HIGH {
                p.add(qh_at).cast::<u32>().read_unaligned()
            } else {
                0
            };
            (load_xq(a, b), widen_u8(p.add(qs_at)), qh, p)
        };
        let (mut lo, mut hi) = (_mm256_and_si256(v, m4), _mm256_srli_epi16::<4>(v));
        if HIGH {
            lo = _mm256_or_si256(lo, high_bits16(qh));
            hi = _mm256_or_si256(hi, high_bits16(qh >> 16));
        }
        let s = madd2(lo, hi, x0, x1);
        if MIN {
            // SAFETY: see the module docs.
            let dm = unsafe { load_f16x2(p) };
            accumulate_min(&mut acc[k], &mut accm[k], s, dm, a, b);
        } else {
            let s = _mm256_sub_epi32(s, offset_sum(if HIGH { 16 } else { 8 }, x0, x1));
            // SAFETY: see the module docs.
            let d = unsafe { load_f16(p) };
            accumulate(&mut acc[k], s, _mm_mul_ss(d, _mm_set_ss(a.dx[b])));
        }
    });
    finish(acc, accm)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_q8_0(row: &[u8], a: &Q16Acts) -> f32 {
    let nb = check(row, a, 34);
    let mut acc = [_mm256_setzero_ps(); 2];
    alternate(nb, |b, k| {
        // SAFETY: see the module docs.
        let ((x0, x1), lo, hi, d) = unsafe {
            let p = row.as_ptr().add(34 * b);
            prefetch_block(p, 34);
            (
                load_xq(a, b),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(2).cast())),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(18).cast())),
                load_f16(p),
            )
        };
        accumulate(
            &mut acc[k],
            madd2(lo, hi, x0, x1),
            _mm_mul_ss(d, _mm_set_ss(a.dx[b])),
        );
    });
    finish(acc, [_mm_setzero_ps(); 2])
}
