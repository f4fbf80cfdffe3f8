//! AVX2 dequantize kernels, bit-exact with the scalar ones: each format's quants are unpacked to
//! bytes with vector ops, widened to f32, then scaled with the same f32 operations in the same order
//! as `crate::q*::dequantize` (a multiply, then a separate add or subtract: never a fused one).
//!
//! Blocks and outputs are walked as fixed-size arrays (`as_chunks`), so every raw load and store
//! below is inside one array whose size is part of its type.

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::x86::load_f16;
use crate::kquant::QK_K;

use super::DequantFn;

/// The AVX2 kernel for `ty`, if there is one.
pub(super) fn kernel(ty: GgmlType) -> Option<DequantFn> {
    Some(match ty {
        GgmlType::F16 => deq_f16,
        GgmlType::BF16 => deq_bf16,
        GgmlType::Q4_0 => deq_q4_0,
        GgmlType::Q4_1 => deq_q4_1,
        GgmlType::Q5_0 => deq_q5_0,
        GgmlType::Q5_1 => deq_q5_1,
        GgmlType::Q8_0 => deq_q8_0,
        GgmlType::Q4_K => deq_q4_k,
        GgmlType::Q5_K => deq_q5_k,
        GgmlType::Q6_K => deq_q6_k,
        _ => return None,
    })
}

/// How 16 quants become values: `q * d`, `q * d + m` or `d * q - m`.
#[derive(Clone, Copy)]
enum Scale {
    Mul(__m256),
    MulAdd(__m256, __m256),
    MulSub(__m256, __m256),
}

/// Writes 16 values from the 16 bytes of `q` (signed or unsigned) to `out`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn emit16(q: __m128i, signed: bool, s: Scale, out: &mut [f32; 16]) {
    let halves = [q, _mm_srli_si128::<8>(q)];
    for (h, o) in halves.into_iter().zip(out.as_chunks_mut::<8>().0) {
        let i = if signed {
            _mm256_cvtepi8_epi32(h)
        } else {
            _mm256_cvtepu8_epi32(h)
        };
        let v = _mm256_cvtepi32_ps(i);
        let v = match s {
            Scale::Mul(d) => _mm256_mul_ps(v, d),
            Scale::MulAdd(d, m) => _mm256_add_ps(_mm256_mul_ps(v, d), m),
            Scale::MulSub(d, m) => _mm256_sub_ps(_mm256_mul_ps(d, v), m),
        };
        // SAFETY: `o` is an array of 8 f32.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
    }
}

/// Writes 32 values from `lo` (elements 0..16) and `hi` (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn emit32(lo: __m128i, hi: __m128i, signed: bool, s: Scale, out: &mut [f32; 32]) {
    let (o, _) = out.as_chunks_mut::<16>();
    emit16(lo, signed, s, &mut o[0]);
    emit16(hi, signed, s, &mut o[1]);
}

/// 16 bytes at `b[at..]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load16<const N: usize>(b: &[u8; N], at: usize) -> __m128i {
    assert!(at + 16 <= N);
    // SAFETY: `at + 16 <= N` bytes of the array.
    unsafe { _mm_loadu_si128(b.as_ptr().add(at).cast()) }
}

/// The f16 at `b[at..]` broadcast as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_at<const N: usize>(b: &[u8; N], at: usize) -> __m256 {
    assert!(at + 2 <= N);
    // SAFETY: `at + 2 <= N` bytes of the array.
    _mm256_broadcastss_ps(unsafe { load_f16(b.as_ptr().add(at)) })
}

/// The low and high nibbles of 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibbles(q: __m128i) -> (__m128i, __m128i) {
    let m = _mm_set1_epi8(0x0f);
    (
        _mm_and_si128(q, m),
        _mm_and_si128(_mm_srli_epi16::<4>(q), m),
    )
}

/// `0x10` in byte `j` where bit `j` of the 16-bit `h` is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bits16(h: u32) -> __m128i {
    let spread = _mm_shuffle_epi8(
        _mm_cvtsi32_si128(h as i32),
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
    );
    let bit = _mm_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit);
    _mm_and_si128(set, _mm_set1_epi8(0x10))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_f16(src: &[u8], dst: &mut [f32]) {
    let (s, st) = src.as_chunks::<16>();
    let (d, dt) = dst.as_chunks_mut::<8>();
    for (s, d) in s.iter().zip(d) {
        // SAFETY: 16 source bytes, 8 destination floats.
        unsafe {
            _mm256_storeu_ps(
                d.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast())),
            )
        };
    }
    for (s, d) in st.as_chunks::<2>().0.iter().zip(dt) {
        *d = half::f16::from_le_bytes(*s).to_f32();
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_bf16(src: &[u8], dst: &mut [f32]) {
    let (s, st) = src.as_chunks::<16>();
    let (d, dt) = dst.as_chunks_mut::<8>();
    for (s, d) in s.iter().zip(d) {
        // SAFETY: 16 source bytes, 8 destination floats.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(s.as_ptr().cast()));
            _mm256_storeu_ps(
                d.as_mut_ptr(),
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h)),
            );
        }
    }
    for (s, d) in st.as_chunks::<2>().0.iter().zip(dt) {
        *d = crate::bf16::to_f32(*s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q4_0(src: &[u8], dst: &mut [f32]) {
    let k8 = _mm_set1_epi8(8);
    for (b, o) in src
        .as_chunks::<18>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<32>().0)
    {
        let (lo, hi) = nibbles(load16(b, 2));
        let s = Scale::Mul(f16_at(b, 0));
        emit32(_mm_sub_epi8(lo, k8), _mm_sub_epi8(hi, k8), true, s, o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src
        .as_chunks::<20>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<32>().0)
    {
        let (lo, hi) = nibbles(load16(b, 4));
        emit32(lo, hi, false, Scale::MulAdd(f16_at(b, 0), f16_at(b, 2)), o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q5_0(src: &[u8], dst: &mut [f32]) {
    let k16 = _mm_set1_epi8(16);
    for (b, o) in src
        .as_chunks::<22>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<32>().0)
    {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = nibbles(load16(b, 6));
        let lo = _mm_sub_epi8(_mm_or_si128(lo, bits16(qh)), k16);
        let hi = _mm_sub_epi8(_mm_or_si128(hi, bits16(qh >> 16)), k16);
        emit32(lo, hi, true, Scale::Mul(f16_at(b, 0)), o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src
        .as_chunks::<24>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<32>().0)
    {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (lo, hi) = nibbles(load16(b, 8));
        let lo = _mm_or_si128(lo, bits16(qh));
        let hi = _mm_or_si128(hi, bits16(qh >> 16));
        emit32(lo, hi, false, Scale::MulAdd(f16_at(b, 0), f16_at(b, 2)), o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src
        .as_chunks::<34>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<32>().0)
    {
        emit32(
            load16(b, 2),
            load16(b, 18),
            true,
            Scale::Mul(f16_at(b, 0)),
            o,
        );
    }
}

/// Per sub-block `(d * sc, dmin * m)` of a Q4_K / Q5_K block, as the scalar `sub_scales`.
#[inline(always)]
fn k_sub_scales(b: &[u8]) -> [(f32, f32); 8] {
    let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    let dmin = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
    let mut s = [0u8; 12];
    s.copy_from_slice(&b[4..16]);
    std::array::from_fn(|j| {
        let (sc, m) = crate::kquant::scale_min(j, &s);
        (d * f32::from(sc), dmin * f32::from(m))
    })
}

/// Writes one Q4_K / Q5_K sub-block of 32 from its bytes `lo` (0..16) and `hi` (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn emit_k(lo: __m128i, hi: __m128i, (d, m): (f32, f32), out: &mut [f32; 32]) {
    let s = Scale::MulSub(_mm256_set1_ps(d), _mm256_set1_ps(m));
    emit32(lo, hi, false, s, out);
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src
        .as_chunks::<144>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK_K>().0)
    {
        let sub = k_sub_scales(b);
        let o = o.as_chunks_mut::<32>().0;
        for c in 0..4 {
            let (l0, h0) = nibbles(load16(b, 16 + 32 * c));
            let (l1, h1) = nibbles(load16(b, 32 + 32 * c));
            emit_k(l0, l1, sub[2 * c], &mut o[2 * c]);
            emit_k(h0, h1, sub[2 * c + 1], &mut o[2 * c + 1]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q5_k(src: &[u8], dst: &mut [f32]) {
    let k16 = _mm_set1_epi8(0x10);
    for (b, o) in src
        .as_chunks::<176>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK_K>().0)
    {
        let sub = k_sub_scales(b);
        let (qh0, qh1) = (load16(b, 16), load16(b, 32));
        let o = o.as_chunks_mut::<32>().0;
        for s in 0..8 {
            let (c, odd) = (s / 2, s % 2 == 1);
            let pick = |v: (__m128i, __m128i)| if odd { v.1 } else { v.0 };
            let l0 = pick(nibbles(load16(b, 48 + 32 * c)));
            let l1 = pick(nibbles(load16(b, 64 + 32 * c)));
            let bit = _mm_set1_epi8(1 << s);
            let h = |qh: __m128i| {
                let set = _mm_cmpeq_epi8(_mm_and_si128(qh, bit), bit);
                _mm_and_si128(set, k16)
            };
            emit_k(
                _mm_or_si128(l0, h(qh0)),
                _mm_or_si128(l1, h(qh1)),
                sub[s],
                &mut o[s],
            );
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn deq_q6_k(src: &[u8], dst: &mut [f32]) {
    let (m4, m3, k32) = (_mm_set1_epi8(0x0f), _mm_set1_epi8(3), _mm_set1_epi8(32));
    for (b, o) in src
        .as_chunks::<210>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK_K>().0)
    {
        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
        let o = o.as_chunks_mut::<16>().0;
        for n in 0..2 {
            for k in 0..4 {
                for h in 0..2 {
                    let ql = load16(b, 64 * n + 32 * (k % 2) + 16 * h);
                    let nib = if k < 2 {
                        _mm_and_si128(ql, m4)
                    } else {
                        _mm_and_si128(_mm_srli_epi16::<4>(ql), m4)
                    };
                    let qh = load16(b, 128 + 32 * n + 16 * h);
                    let sh = _mm_cvtsi32_si128(2 * k as i32);
                    let hb = _mm_slli_epi16::<4>(_mm_and_si128(_mm_srl_epi16(qh, sh), m3));
                    let q = _mm_sub_epi8(_mm_or_si128(nib, hb), k32);
                    let g = 8 * n + 2 * k + h;
                    let sc = d * f32::from(b[192 + g] as i8);
                    emit16(q, true, Scale::Mul(_mm256_set1_ps(sc)), &mut o[g]);
                }
            }
        }
    }
}
