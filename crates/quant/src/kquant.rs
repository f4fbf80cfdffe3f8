//! Pieces shared by the K-quant formats (super-blocks of 256 weights): the 6-bit scale/min packing of
//! Q4_K and Q5_K, and the per-sub-block scale searches used by the quantizers.
//!
//! The searches implement the algorithms of ggml's reference K-quant quantizers (`quantize_row_q*_K_ref`:
//! weighted least squares over a sweep of candidate scales, or a per-value refinement for Q3_K), written
//! independently, with the same float operations: the output matched llama.cpp's byte for byte on
//! every input tried (pinned by `tests/llama_cpp_golden.rs`). Where ggml would assert or hit undefined
//! behaviour (rounding values beyond ±2^22, negative scales wrapping in a `uint8_t`), these saturate.

use crate::util::{f16_to_f32, f32_to_f16, nearest_int};

/// Weights per super-block.
pub(crate) const QK_K: usize = 256;

/// Below this magnitude a group counts as all zeros (ggml's `GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Unpacks the 6-bit scale and min of sub-block `j` (0..8) from the 12 packed bytes of Q4_K / Q5_K.
///
/// Bytes 0..4 hold scales 0..4 in their low 6 bits, bytes 4..8 mins 0..4; bytes 8..12 hold the low 4
/// bits of scales 4..8 (low nibble) and mins 4..8 (high nibble), whose top 2 bits sit in the top 2 bits
/// of bytes 0..4 (scales) and 4..8 (mins).
#[inline(always)]
pub(crate) fn scale_min(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Per sub-block `(d * scale, dmin * min)` as f32 for the f16 `d`, `dmin` and 12 packed scale bytes of
/// Q4_K / Q5_K.
pub(crate) fn six_bit_sub_scales(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12]) -> [(f32, f32); 8] {
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    std::array::from_fn(|j| {
        let (sc, m) = scale_min(j, scales);
        (d * f32::from(sc), dmin * f32::from(m))
    })
}

/// Inverse of [`scale_min`] for 6-bit scales `ls` and mins `lm`.
pub(crate) fn pack_scale_mins(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (ls[j] & 63) | ((ls[j + 4] >> 4) << 6);
        s[j + 4] = (lm[j] & 63) | ((lm[j + 4] >> 4) << 6);
        s[j + 8] = (ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4);
    }
    s
}

/// How [`fit_scale_min`] sweeps candidate scales: `iscale = (nmax + rmin + rdelta * step) / (max - min)`
/// for `step` in `0..=steps`; `mad` picks absolute instead of squared error.
#[derive(Clone, Copy)]
pub(crate) struct Sweep {
    pub rmin: f32,
    pub rdelta: f32,
    pub steps: u32,
    pub mad: bool,
}

/// Fits `x_i ≈ scale * q_i - min` with `q_i` in `0..=nmax` minimising the `w`-weighted error, writing
/// the quants to `q` and returning `(scale, min)` with `min >= 0` (the group's minimum is clamped to at
/// most 0, so the offset is never positive).
///
/// Starts from the plain min/max grid; then for each swept grid, solves the weighted least-squares
/// `(scale, min)` for its quants and keeps the best candidate by weighted error.
pub(crate) fn fit_scale_min<const N: usize>(
    x: &[f32; N],
    w: &[f32; N],
    nmax: u8,
    sweep: Sweep,
    q: &mut [u8; N],
) -> (f32, f32) {
    // Comparisons as ggml makes them, so signed zeros come out the same.
    let (mut lo, mut hi) = (x[0], x[0]);
    for &v in x {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    if lo > 0.0 {
        lo = 0.0;
    }
    if hi == lo {
        q.fill(0);
        return (0.0, -lo);
    }
    let top = f32::from(nmax);
    let grid = |iscale: f32, lo: f32| -> [u8; N] {
        x.map(|v| nearest_int(iscale * (v - lo)).clamp(0, i32::from(nmax)) as u8)
    };
    let error = |scale: f32, lo: f32, q: &[u8; N]| -> f32 {
        let mut e = 0.0f32;
        for i in 0..N {
            let diff = scale * f32::from(q[i]) + lo - x[i];
            e += w[i] * if sweep.mad { diff.abs() } else { diff * diff };
        }
        e
    };

    let iscale = top / (hi - lo);
    *q = grid(iscale, lo);
    let mut scale = 1.0 / iscale;
    let mut best = error(scale, lo, q);

    let sum_w: f32 = w.iter().sum();
    let sum_x: f32 = w.iter().zip(x).map(|(w, x)| w * x).sum();
    for step in 0..=sweep.steps {
        let iscale = (sweep.rmin + sweep.rdelta * step as f32 + top) / (hi - lo);
        let cand = grid(iscale, lo);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..N {
            let l = f32::from(cand[i]);
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det <= 0.0 {
            continue;
        }
        let mut s = (sum_w * sum_xl - sum_x * sum_l) / det;
        let mut m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if m > 0.0 {
            m = 0.0;
            s = sum_xl / sum_l2;
        }
        let e = error(s, m, &cand);
        if e < best {
            *q = cand;
            best = e;
            scale = s;
            lo = m;
        }
    }
    (scale, -lo)
}

/// The largest magnitude in `x` and the signed value that has it (the first one on ties).
pub(crate) fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Quants of `x` on the grid `iscale` clamped to `-nmax..nmax`, and their `x²`-weighted sums
/// `(Σ w·x·l, Σ w·l²)`.
fn symmetric_grid<const N: usize>(x: &[f32; N], nmax: i32, iscale: f32) -> ([i8; N], f32, f32) {
    let q = x.map(|v| nearest_int(iscale * v).clamp(-nmax, nmax - 1) as i8);
    let (mut sum_lx, mut sum_l2) = (0.0f32, 0.0f32);
    for (&v, &l) in x.iter().zip(&q) {
        let (w, l) = (v * v, f32::from(l));
        sum_lx += w * v * l;
        sum_l2 += w * l * l;
    }
    (q, sum_lx, sum_l2)
}

/// Fits `x_i ≈ scale * q_i` with signed `q_i` in `-nmax..nmax` (note: `nmax - 1` at the top) minimising
/// the error weighted by `x_i²`, writing the quants to `q` and returning `scale` (negative when the
/// value of largest magnitude is positive: that value maps to `-nmax`). Tries 19 grids around
/// `nmax / max` and keeps the best least-squares fit. An all-(near-)zero group gives scale 0 and every
/// quant at `-nmax` (stored as 0, as ggml leaves it; the value is 0 either way).
pub(crate) fn fit_symmetric<const N: usize>(x: &[f32; N], nmax: i32, q: &mut [i8; N]) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        q.fill(-nmax as i8);
        return 0.0;
    }
    let (cand, sum_lx, sum_l2) = symmetric_grid(x, nmax, -(nmax as f32) / max);
    *q = cand;
    let mut scale = if sum_l2 > 0.0 { sum_lx / sum_l2 } else { 0.0 };
    let mut best = scale * sum_lx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let (cand, sum_lx, sum_l2) =
            symmetric_grid(x, nmax, -(nmax as f32 + 0.1 * step as f32) / max);
        // Σlx²/Σl² is the error reduction of the least-squares scale: larger is better.
        if sum_l2 > 0.0 && sum_lx * sum_lx > best * sum_l2 {
            *q = cand;
            scale = sum_lx / sum_l2;
            best = scale * sum_lx;
        }
    }
    scale
}

/// Like [`fit_symmetric`], but from the single grid `nmax / max` refined one value at a time: each quant
/// is re-rounded against the least-squares scale of the others and kept when that improves the fit
/// (`Σlx² / Σl²` grows), for up to 5 passes. As in ggml's Q3_K quantizer, a value is only revisited
/// while the others' `Σ w·x·l` is positive (so groups whose largest magnitude is positive keep the
/// plain grid).
pub(crate) fn fit_symmetric_refined<const N: usize>(
    x: &[f32; N],
    nmax: i32,
    q: &mut [i8; N],
) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        q.fill(-nmax as i8);
        return 0.0;
    }
    let (cand, mut sum_lx, mut sum_l2) = symmetric_grid(x, nmax, -(nmax as f32) / max);
    *q = cand;
    for _ in 0..5 {
        let mut changed = false;
        for (&v, l) in x.iter().zip(q.iter_mut()) {
            let (w, old) = (v * v, f32::from(*l));
            let slx = sum_lx - w * v * old;
            if slx <= 0.0 {
                continue;
            }
            let sl2 = sum_l2 - w * old * old;
            let new = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1) as i8;
            if new == *l {
                continue;
            }
            let slx = slx + w * v * f32::from(new);
            let sl2 = sl2 + w * f32::from(new) * f32::from(new);
            if sl2 > 0.0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2 {
                (*l, sum_lx, sum_l2) = (new, slx, sl2);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    sum_lx / sum_l2
}

/// The largest of `v` and +0.0 (by `>`, so a -0.0 entry never wins over the starting +0.0).
pub(crate) fn max_or_zero(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |m, &s| if s > m { s } else { m })
}

/// Quantizes a non-negative sub-block scale to `0..=max_q` given the inverse step `inv`.
#[inline(always)]
pub(crate) fn quantize_scale(v: f32, inv: f32, max_q: i32) -> u8 {
    nearest_int(inv * v).clamp(0, max_q) as u8
}

/// `levels / max`, or 0 when `max` is not positive: the inverse step that quantizes sub-block scales
/// (or mins) against their maximum.
pub(crate) fn inverse_step(max: f32, levels: f32) -> f32 {
    if max > 0.0 { levels / max } else { 0.0 }
}

/// Recomputes the quants `0..=nmax` of `x` against the rounded sub-block `(d, m)` (sub-blocks of
/// `QK_K / M` values). A sub-block whose `d` is 0 keeps the search's quants (as ggml leaves them; its
/// values are `-m` either way).
pub(crate) fn requantize_affine<const M: usize>(
    sub: &[(f32, f32); M],
    x: &[f32; QK_K],
    nmax: i32,
    q: &mut [u8; QK_K],
) {
    let n = QK_K / M;
    for (j, &(d, m)) in sub.iter().enumerate() {
        if d == 0.0 {
            continue;
        }
        for i in n * j..n * j + n {
            q[i] = nearest_int((x[i] + m) / d).clamp(0, nmax) as u8;
        }
    }
}

/// The quants of `x` against the rounded sub-block scales `sub` (sub-blocks of 16), in `-k..k` and
/// offset by `k` (so `0..2k`). A sub-block whose scale is 0 keeps the search's quants `l` (as ggml
/// leaves them; its values are 0 either way).
pub(crate) fn requantize_symmetric(
    sub: &[f32; 16],
    x: &[f32; QK_K],
    k: i8,
    l: &[i8; QK_K],
) -> [u8; QK_K] {
    let mut q = l.map(|l| (l + k) as u8);
    let k = i32::from(k);
    for (j, &d) in sub.iter().enumerate() {
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            q[i] = (nearest_int(x[i] / d).clamp(-k, k - 1) + k) as u8;
        }
    }
    q
}

/// The quantizer of Q4_K and Q5_K, up to the packing of the quants: per sub-block of 32 a weighted
/// `(scale, min)` search (weights `rms + |x|`, quants `0..=nmax`), then 6-bit quantization of the
/// scales and mins against their maxima, then the quants recomputed against the rounded scales.
/// Returns the block's `d`, `dmin`, packed scales and the 256 quants in element order.
pub(crate) fn quantize_six_bit(
    x: &[f32; QK_K],
    nmax: u8,
    sweep: Sweep,
) -> ([u8; 2], [u8; 2], [u8; 12], [u8; QK_K]) {
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let mut q = [0u8; QK_K];
    let subs = x.as_chunks::<32>().0.iter().zip(q.as_chunks_mut::<32>().0);
    for (j, (sub, l)) in subs.enumerate() {
        let rms = (sub.iter().map(|v| v * v).sum::<f32>() / 32.0).sqrt();
        let w = sub.map(|v| rms + v.abs());
        (scales[j], mins[j]) = fit_scale_min(sub, &w, nmax, sweep, l);
    }
    let max_scale = max_or_zero(&scales);
    let max_min = max_or_zero(&mins);
    let inv_scale = inverse_step(max_scale, 63.0);
    let inv_min = inverse_step(max_min, 63.0);
    let ls = scales.map(|s| quantize_scale(s, inv_scale, 63));
    let lm = mins.map(|m| quantize_scale(m, inv_min, 63));
    let d = f32_to_f16(max_scale / 63.0);
    let dmin = f32_to_f16(max_min / 63.0);
    let packed = pack_scale_mins(&ls, &lm);
    requantize_affine(
        &six_bit_sub_scales(d, dmin, &packed),
        x,
        i32::from(nmax),
        &mut q,
    );
    (d, dmin, packed, q)
}
