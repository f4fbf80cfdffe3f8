//! x86-64 (AVX2 + FMA + F16C) f32 kernels and small helpers shared with the q16 kernels.

use std::arch::asm;
use std::arch::x86_64::*;

/// `v` unchanged, through an empty `asm!` that LLVM cannot see into. Placed after a widening load so
/// LLVM keeps the mask / shift on the wide lanes instead of narrowing them to bytes before the widen,
/// which costs an extra widen and mask per vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn opaque(mut v: __m256i) -> __m256i {
    // SAFETY: an empty template that reads and writes only the register it is given.
    unsafe { asm!("/* {0} */", inout(ymm_reg) v, options(pure, nomem, nostack, preserves_flags)) };
    v
}

/// How far ahead of the weights being read the kernels prefetch, in bytes.
pub(crate) const PREFETCH: usize = 2048;
const PREFETCH_STEP: usize = 64;

/// Asks for the cache lines `PREFETCH` bytes after the `len` bytes at `p`: a hint (any address is
/// harmless, nothing is read). The matvec kernels walk each row front to back, one row after the
/// other, and call this once per block; without it a single thread streamed 100+ MB matrices from
/// DRAM at 7-11 GB/s instead of 14-17 (measured on the Zen 4 dev machine).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_block(p: *const u8, len: usize) {
    let p = p.wrapping_add(PREFETCH);
    let mut off = 0;
    while off < len {
        // A prefetch never faults: any address is fine (hence `wrapping_add`).
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast());
        off += PREFETCH_STEP;
    }
}

/// Sum of the 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The f16 at `p` (little-endian) widened to f32 in lane 0.
///
/// # Safety
/// `p..p + 2` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load_f16(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees two readable bytes.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))
}

/// The two f16 at `p` (little-endian) widened to f32 in lanes 0 and 1.
///
/// # Safety
/// `p..p + 4` is readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load_f16x2(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees four readable bytes.
    let h = unsafe { p.cast::<i32>().read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(h))
}

/// See [`super::dot_f32`]: four 8-lane FMA accumulators, then a scalar tail (over the common length).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY (all loads): `i + 32 <= n` (or `i + 8 <= n`) bounds every load in both slices.
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum(v);
    for j in i..n {
        s = a[j].mul_add(b[j], s);
    }
    s
}

/// See [`super::axpy_f32`] (over the common length).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = x.len().min(y.len());
    let (px, py) = (x.as_ptr(), y.as_mut_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    // SAFETY (all accesses): `i + 16 <= n` (or `i + 8 <= n`) bounds every access in both slices.
    while i + 16 <= n {
        unsafe {
            let y0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
            let y1 = _mm256_fmadd_ps(
                av,
                _mm256_loadu_ps(px.add(i + 8)),
                _mm256_loadu_ps(py.add(i + 8)),
            );
            _mm256_storeu_ps(py.add(i), y0);
            _mm256_storeu_ps(py.add(i + 8), y1);
        }
        i += 16;
    }
    while i + 8 <= n {
        unsafe {
            let y0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
            _mm256_storeu_ps(py.add(i), y0);
        }
        i += 8;
    }
    for j in i..n {
        y[j] = a.mul_add(x[j], y[j]);
    }
}

/// Float weight formats [`matvec_f32_rows`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatKind {
    F32,
    F16,
    Bf16,
}

impl FloatKind {
    fn bytes(self) -> usize {
        if self == FloatKind::F32 { 4 } else { 2 }
    }
}

/// Eight weights of `kind` starting at element `i` of the row at `p`, as f32.
///
/// # Safety
/// The row at `p` holds at least `i + 8` elements.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8(kind: FloatKind, p: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller guarantees the 8 elements are in bounds.
    unsafe {
        match kind {
            FloatKind::F32 => _mm256_loadu_ps(p.add(4 * i).cast()),
            FloatKind::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i).cast())),
            FloatKind::Bf16 => {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(2 * i).cast()));
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
            }
        }
    }
}

/// One weight of `kind` (element `i` of the row at `p`) as f32.
///
/// # Safety
/// The row at `p` holds at least `i + 1` elements.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load1(kind: FloatKind, p: *const u8, i: usize) -> f32 {
    // SAFETY: the caller guarantees the element is in bounds.
    unsafe {
        match kind {
            FloatKind::F32 => p.add(4 * i).cast::<f32>().read_unaligned(),
            FloatKind::F16 => _mm_cvtss_f32(load_f16(p.add(2 * i))),
            FloatKind::Bf16 => {
                f32::from_bits(u32::from(p.add(2 * i).cast::<u16>().read_unaligned()) << 16)
            }
        }
    }
}

/// `row · x` for one row of `kind` (at least `x.len()` elements), with four accumulators.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_f32(kind: FloatKind, row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    assert!(row.len() >= n * kind.bytes());
    let (p, px) = (row.as_ptr(), x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY (loads): `i + 32 <= n` (or `i + 8 <= n`), and the row holds `n` elements.
    while i + 32 <= n {
        prefetch_block(p.wrapping_add(i * kind.bytes()), 32 * kind.bytes());
        for (k, acc) in acc.iter_mut().enumerate() {
            let (w, xv) = unsafe {
                (
                    load8(kind, p, i + 8 * k),
                    _mm256_loadu_ps(px.add(i + 8 * k)),
                )
            };
            *acc = _mm256_fmadd_ps(w, xv, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        let (w, xv) = unsafe { (load8(kind, p, i), _mm256_loadu_ps(px.add(i))) };
        acc[0] = _mm256_fmadd_ps(w, xv, acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    for (j, &xj) in x.iter().enumerate().skip(i) {
        // SAFETY: `j < n`, inside the row.
        s = unsafe { load1(kind, p, j) }.mul_add(xj, s);
    }
    s
}

/// `y[r] = row r · x` for the `y.len()` rows of `kind` in `rows` (`row_bytes` each, covering `x`),
/// one row after the other (see [`prefetch_block`] for why not several at once).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn matvec_f32_rows(
    kind: FloatKind,
    rows: &[u8],
    row_bytes: usize,
    x: &[f32],
    y: &mut [f32],
) {
    assert!(row_bytes > 0);
    for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
        *y = row_f32(kind, row, x);
    }
}
