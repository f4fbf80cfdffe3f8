//! Fast unpacking of one weight row's quants for [`Panels`](super::Panels): the formats' bit layouts
//! written as straight loops over fixed-size arrays, which the compiler vectorizes, compiled once
//! per instruction set (AVX2, AVX-512) behind `#[target_feature]`. `panel::decode_row` (through
//! each format's `quants`) is the reference; `tests/q16_gemm.rs` checks the panels are identical.

use gguf::GgmlType;

use super::PANEL_ROWS;
use crate::kquant::{QK_K, six_bit_sub_scales};
use crate::simd::Isa;
use crate::util::f16_to_f32;
use crate::{q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};

/// Unpacks `row` (whole blocks of `ty` covering `q.len()` values; `scale` and `min` sized for them)
/// with code for `isa`; returns false (and writes nothing) when there is no fast path for `ty` or
/// `isa`.
pub(super) fn decode_row(
    isa: Isa,
    ty: GgmlType,
    row: &[u8],
    q: &mut [i16],
    scale: &mut [f32],
    min: &mut [f32],
) -> bool {
    if !supported(ty) {
        return false;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the instruction set is present (checked first).
        Isa::Avx512 if isa.is_available() => unsafe { row_avx512(ty, row, q, scale, min) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 if isa.is_available() => unsafe { row_avx2(ty, row, q, scale, min) },
        Isa::Scalar => return false,
        _ => row_portable(ty, row, q, scale, min),
    }
    true
}

fn supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    )
}

/// Spreads one panel's rows `rows` (32 rows of `k` quants, row-major) into the panel layout `out`
/// (for each pair of values, the 32 rows' pairs): a 32 x k/2 transpose of 32-bit pairs.
pub(super) fn interleave(isa: Isa, rows: &[i16], out: &mut [i16], k: usize) {
    assert!(rows.len() == PANEL_ROWS * k && out.len() == PANEL_ROWS * k && k.is_multiple_of(32));
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_available() {
        // SAFETY: AVX-512 F is present; the lengths are asserted above.
        return unsafe { interleave_avx512(rows, out, k) };
    }
    let _ = isa;
    interleave_scalar(rows, out, k);
}

/// The scalar twin of [`interleave`].
fn interleave_scalar(rows: &[i16], out: &mut [i16], k: usize) {
    for (i, row) in rows.chunks_exact(k).enumerate() {
        for (pair, v) in out
            .chunks_exact_mut(2 * PANEL_ROWS)
            .zip(row.chunks_exact(2))
        {
            pair[2 * i] = v[0];
            pair[2 * i + 1] = v[1];
        }
    }
}

/// [`interleave`] in 16 x 16 transposes of 32-bit pairs (4 rounds of 16 shuffles each).
///
/// # Safety
/// AVX-512 F present; `rows` and `out` hold `32 k` values, `k` a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interleave_avx512(rows: &[i16], out: &mut [i16], k: usize) {
    use std::arch::x86_64::*;
    let pairs = k / 2;
    let (src, dst) = (rows.as_ptr().cast::<u32>(), out.as_mut_ptr().cast::<u32>());
    for j0 in (0..pairs).step_by(16) {
        for half in 0..2 {
            // SAFETY: row `16 half + r` < 32, pairs `j0..j0 + 16` <= k / 2: inside `rows`.
            let r: [__m512i; 16] = std::array::from_fn(|i| unsafe {
                _mm512_loadu_si512(src.add((16 * half + i) * pairs + j0).cast())
            });
            let mut t = [_mm512_setzero_si512(); 16];
            for i in 0..8 {
                t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
            }
            // u[4 i + c], lane L: column 4 L + c of rows 4 i .. 4 i + 4.
            let mut u = [_mm512_setzero_si512(); 16];
            for i in 0..4 {
                u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
                u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
                u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
                u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
            }
            for c in 0..4 {
                let x0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(u[c], u[4 + c]);
                let x1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(u[c], u[4 + c]);
                let y0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(u[8 + c], u[12 + c]);
                let y1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(u[8 + c], u[12 + c]);
                let cols = [
                    _mm512_shuffle_i32x4::<0b10_00_10_00>(x0, y0),
                    _mm512_shuffle_i32x4::<0b11_01_11_01>(x0, y0),
                    _mm512_shuffle_i32x4::<0b10_00_10_00>(x1, y1),
                    _mm512_shuffle_i32x4::<0b11_01_11_01>(x1, y1),
                ];
                for (l, v) in cols.into_iter().enumerate() {
                    let j = j0 + 4 * l + c;
                    // SAFETY: pair `j` < k / 2; its 16 rows from `16 half` are inside `out`.
                    unsafe { _mm512_storeu_si512(dst.add(j * PANEL_ROWS + 16 * half).cast(), v) };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn row_avx512(ty: GgmlType, row: &[u8], q: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    row_portable(ty, row, q, scale, min);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_avx2(ty: GgmlType, row: &[u8], q: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    row_portable(ty, row, q, scale, min);
}

#[inline(always)]
fn row_portable(ty: GgmlType, row: &[u8], q: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 => small::<{ q4_0::BLOCK_BYTES }>(row, q, scale, min, |b, q, _| {
            nibbles(b[2..18].try_into().expect("16 bytes"), 0, -8, q);
        }),
        GgmlType::Q4_1 => small::<{ q4_1::BLOCK_BYTES }>(row, q, scale, min, |b, q, m| {
            *m = f16_to_f32([b[2], b[3]]);
            nibbles(b[4..20].try_into().expect("16 bytes"), 0, 0, q);
        }),
        GgmlType::Q5_0 => small::<{ q5_0::BLOCK_BYTES }>(row, q, scale, min, |b, q, _| {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            nibbles(b[6..22].try_into().expect("16 bytes"), qh, -16, q);
        }),
        GgmlType::Q5_1 => small::<{ q5_1::BLOCK_BYTES }>(row, q, scale, min, |b, q, m| {
            *m = f16_to_f32([b[2], b[3]]);
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            nibbles(b[8..24].try_into().expect("16 bytes"), qh, 0, q);
        }),
        GgmlType::Q8_0 => small::<{ q8_0::BLOCK_BYTES }>(row, q, scale, min, |b, q, _| {
            for (d, &s) in q.iter_mut().zip(&b[2..34]) {
                *d = i16::from(s as i8);
            }
        }),
        GgmlType::Q4_K => k_quants(row, q, scale, min, |b: &[u8; q4_k::BLOCK_BYTES], q| {
            let qs: &[u8; 128] = b[16..144].try_into().expect("128 bytes");
            for c in 0..4 {
                for l in 0..32 {
                    let v = qs[32 * c + l];
                    q[64 * c + l] = i16::from(v & 0x0f);
                    q[64 * c + 32 + l] = i16::from(v >> 4);
                }
            }
            sub_scales(b)
        }),
        GgmlType::Q5_K => k_quants(row, q, scale, min, |b: &[u8; q5_k::BLOCK_BYTES], q| {
            let qh: &[u8; 32] = b[16..48].try_into().expect("32 bytes");
            let qs: &[u8; 128] = b[48..176].try_into().expect("128 bytes");
            for c in 0..4 {
                for l in 0..32 {
                    let v = qs[32 * c + l];
                    let h = qh[l] >> (2 * c);
                    q[64 * c + l] = i16::from((v & 0x0f) | ((h & 1) << 4));
                    q[64 * c + 32 + l] = i16::from((v >> 4) | ((h & 2) << 3));
                }
            }
            sub_scales(b)
        }),
        GgmlType::Q6_K => {
            let (blocks, _) = row.as_chunks::<{ q6_k::BLOCK_BYTES }>();
            let (qs, _) = q.as_chunks_mut::<QK_K>();
            let (ss, _) = scale.as_chunks_mut::<16>();
            for ((b, q), s) in blocks.iter().zip(qs).zip(ss) {
                let d = f16_to_f32([b[208], b[209]]);
                for (s, &c) in s.iter_mut().zip(&b[192..208]) {
                    *s = d * f32::from(c as i8);
                }
                for n in 0..2 {
                    let ql: &[u8; 64] = b[64 * n..64 * n + 64].try_into().expect("64 bytes");
                    let qh: &[u8; 32] = b[128 + 32 * n..160 + 32 * n].try_into().expect("32");
                    let q = &mut q[128 * n..128 * n + 128];
                    for l in 0..32 {
                        let (a, c, h) = (ql[l], ql[32 + l], qh[l]);
                        q[l] = i16::from((a & 0x0f) | ((h & 3) << 4)) - 32;
                        q[32 + l] = i16::from((c & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
                        q[64 + l] = i16::from((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
                        q[96 + l] = i16::from((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
                    }
                }
            }
        }
        _ => {}
    }
}

/// Q4_K / Q5_K per sub-block `(d * sc, dmin * m)` from the block's first 16 bytes.
#[inline(always)]
fn sub_scales<const N: usize>(b: &[u8; N]) -> [(f32, f32); 8] {
    let scales: &[u8; 12] = b[4..16].try_into().expect("12 bytes");
    six_bit_sub_scales([b[0], b[1]], [b[2], b[3]], scales)
}

/// 32-value formats: the f16 scale is the block's first two bytes; `f` unpacks the quants and
/// sets the minimum term.
#[inline(always)]
fn small<const N: usize>(
    row: &[u8],
    q: &mut [i16],
    scale: &mut [f32],
    min: &mut [f32],
    f: impl Fn(&[u8; N], &mut [i16; 32], &mut f32),
) {
    let (blocks, _) = row.as_chunks::<N>();
    let (qs, _) = q.as_chunks_mut::<32>();
    let mut unused = 0.0;
    for (i, (b, q)) in blocks.iter().zip(qs).enumerate() {
        scale[i] = f16_to_f32([b[0], b[1]]);
        let m = min.get_mut(i).unwrap_or(&mut unused);
        f(b, q, m);
    }
}

/// Q4_K / Q5_K: `f` unpacks a super-block's quants and returns its sub-block scales; the minimum
/// terms are stored negated (`value = d * q - m`).
#[inline(always)]
fn k_quants<const N: usize>(
    row: &[u8],
    q: &mut [i16],
    scale: &mut [f32],
    min: &mut [f32],
    f: impl Fn(&[u8; N], &mut [i16; QK_K]) -> [(f32, f32); 8],
) {
    let (blocks, _) = row.as_chunks::<N>();
    let (qs, _) = q.as_chunks_mut::<QK_K>();
    let (ss, _) = scale.as_chunks_mut::<8>();
    let (ms, _) = min.as_chunks_mut::<8>();
    for (((b, q), s), m) in blocks.iter().zip(qs).zip(ss).zip(ms) {
        for (i, (d, mn)) in f(b, q).into_iter().enumerate() {
            s[i] = d;
            m[i] = -mn;
        }
    }
}

/// The 32 quants of 16 nibble bytes (low nibbles first), bit 4 of quant `i` from bit `i` of `qh`,
/// plus `offset`.
#[inline(always)]
fn nibbles(qs: &[u8; 16], qh: u32, offset: i16, q: &mut [i16; 32]) {
    for j in 0..16 {
        let lo = (qs[j] & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        q[j] = i16::from(lo) + offset;
        q[j + 16] = i16::from(hi) + offset;
    }
}
