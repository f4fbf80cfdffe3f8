//! The scalar twin of the q16 kernels: the same exact integer sums, in straightforward loops.
//!
//! Per block (or group) the weight quants `q` (unsigned as stored, offset removed with the `isum16`
//! sums where the format has one) are multiplied by the activation quants in i32, which is exact; then
//! `scale * dx * isum` (and `min * sx`) are accumulated in f32, in element order.

use gguf::GgmlType;

use super::{Q16Acts, QK16, check_row};
use crate::kquant::QK_K;
use crate::util::f16_to_f32;
use crate::{QuantError, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};

/// Dot product of one row of `ty` (a whole number of blocks covering exactly `a.len()` values) with the
/// q16 activations `a`. Errors (never panics) on an unsupported type or mismatched lengths.
pub fn dot_q16(ty: GgmlType, row: &[u8], a: &Q16Acts) -> Result<f32, QuantError> {
    check_row(ty, row.len(), a.len())?;
    let f = dot_fn(ty).ok_or(QuantError::Unsupported {
        ty,
        op: crate::Op::Dot,
    })?;
    Ok(f(row, a))
}

/// A row kernel: `row` holds exactly the blocks of `a.len()` values (checked by the caller).
pub(crate) type DotFn = fn(&[u8], &Q16Acts) -> f32;

pub(crate) fn dot_fn(ty: GgmlType) -> Option<DotFn> {
    Some(match ty {
        GgmlType::Q4_0 => dot_q4_0,
        GgmlType::Q4_1 => dot_q4_1,
        GgmlType::Q5_0 => dot_q5_0,
        GgmlType::Q5_1 => dot_q5_1,
        GgmlType::Q8_0 => dot_q8_0,
        GgmlType::Q2_K => dot_q2_k,
        GgmlType::Q3_K => dot_q3_k,
        GgmlType::Q4_K => dot_q4_k,
        GgmlType::Q5_K => dot_q5_k,
        GgmlType::Q6_K => dot_q6_k,
        _ => return None,
    })
}

/// `Σ q_i * xq_i` over matching slices, exact in i32 (|q| < 256, |xq| <= 32767, at most 32 terms).
#[inline(always)]
fn isum<T: Copy + Into<i32>>(q: &[T], xq: &[i16]) -> i32 {
    q.iter()
        .zip(xq)
        .map(|(&q, &x)| q.into() * i32::from(x))
        .sum()
}

/// The activation quants of block `b` (32 values).
#[inline(always)]
fn xq(a: &Q16Acts, b: usize) -> &[i16] {
    &a.q[QK16 * b..QK16 * (b + 1)]
}

/// Σ xq over block `b` of 32 values.
#[inline(always)]
fn isum32(a: &Q16Acts, b: usize) -> i32 {
    a.isum16[2 * b] + a.isum16[2 * b + 1]
}

fn dot_q4_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in row
        .as_chunks::<{ q4_0::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q4_0::Block::from_bytes(blk);
        let q = blk.quants().map(|v| (v + 8) as u8);
        let s = isum(&q, xq(a, b)) - 8 * isum32(a, b);
        sum += f16_to_f32(blk.d) * a.dx[b] * s as f32;
    }
    sum
}

fn dot_q4_1(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in row
        .as_chunks::<{ q4_1::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q4_1::Block::from_bytes(blk);
        let s = isum(&blk.quants(), xq(a, b));
        sum += f16_to_f32(blk.d) * a.dx[b] * s as f32 + f16_to_f32(blk.m) * a.sx[b];
    }
    sum
}

fn dot_q5_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in row
        .as_chunks::<{ q5_0::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q5_0::Block::from_bytes(blk);
        let q = blk.quants().map(|v| (v + 16) as u8);
        let s = isum(&q, xq(a, b)) - 16 * isum32(a, b);
        sum += f16_to_f32(blk.d) * a.dx[b] * s as f32;
    }
    sum
}

fn dot_q5_1(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in row
        .as_chunks::<{ q5_1::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q5_1::Block::from_bytes(blk);
        let s = isum(&blk.quants(), xq(a, b));
        sum += f16_to_f32(blk.d) * a.dx[b] * s as f32 + f16_to_f32(blk.m) * a.sx[b];
    }
    sum
}

fn dot_q8_0(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in row
        .as_chunks::<{ q8_0::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q8_0::Block::from_bytes(blk);
        let s = isum(&blk.quants(), xq(a, b));
        sum += f16_to_f32(blk.d) * a.dx[b] * s as f32;
    }
    sum
}

/// Q4_K and Q5_K: per sub-block of 32, `(d * sc) * dx * Σ q·xq - (dmin * m) * sx`.
fn dot_k_min(sub: &[(f32, f32); 8], q: &[u8; QK_K], a: &Q16Acts, sb: usize) -> f32 {
    let mut sum = 0.0f32;
    for (s, &(d, m)) in sub.iter().enumerate() {
        let b = 8 * sb + s;
        let i = isum(&q[QK16 * s..QK16 * (s + 1)], xq(a, b));
        sum += d * a.dx[b] * i as f32 - m * a.sx[b];
    }
    sum
}

fn dot_q4_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (sb, blk) in row
        .as_chunks::<{ q4_k::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q4_k::Block::from_bytes(blk);
        sum += dot_k_min(&blk.sub_scales(), &blk.quants(), a, sb);
    }
    sum
}

fn dot_q5_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (sb, blk) in row
        .as_chunks::<{ q5_k::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q5_k::Block::from_bytes(blk);
        sum += dot_k_min(&blk.sub_scales(), &blk.quants(), a, sb);
    }
    sum
}

/// Q6_K: per group `k` of 16, `(d * sc_k) * dx * (Σ q·xq - 32 Σ xq)` with `q` in 0..64.
fn dot_q6_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (sb, blk) in row
        .as_chunks::<{ q6_k::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q6_k::Block::from_bytes(blk);
        let q = blk.quants().map(|v| (v + 32) as u8);
        let mut s = 0.0f32;
        for (k, d) in blk.sub_scales().into_iter().enumerate() {
            let g = 16 * sb + k;
            let i = isum(&q[16 * k..16 * (k + 1)], &a.q[16 * g..16 * (g + 1)]) - 32 * a.isum16[g];
            s += d * a.dx[g / 2] * i as f32;
        }
        sum += s;
    }
    sum
}

/// Q2_K: per group `k` of 16, `(d * sc_k) * dx * Σ q·xq - (dmin * m_k) * dx * Σ xq` (the group's sum
/// of activations taken from the quants, as there is no f32 sum per 16).
fn dot_q2_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (sb, blk) in row
        .as_chunks::<{ q2_k::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q2_k::Block::from_bytes(blk);
        let q = blk.quants();
        let mut s = 0.0f32;
        for (k, (d, m)) in blk.sub_scales().into_iter().enumerate() {
            let g = 16 * sb + k;
            let i = isum(&q[16 * k..16 * (k + 1)], &a.q[16 * g..16 * (g + 1)]);
            let dx = a.dx[g / 2];
            s += d * dx * i as f32 - m * dx * a.isum16[g] as f32;
        }
        sum += s;
    }
    sum
}

/// Q3_K: per group `k` of 16, `(d * (sc_k - 32)) * dx * Σ q·xq` with signed `q` in -4..=3.
fn dot_q3_k(row: &[u8], a: &Q16Acts) -> f32 {
    let mut sum = 0.0f32;
    for (sb, blk) in row
        .as_chunks::<{ q3_k::BLOCK_BYTES }>()
        .0
        .iter()
        .enumerate()
    {
        let blk = q3_k::Block::from_bytes(blk);
        let q = blk.quants();
        let mut s = 0.0f32;
        for (k, d) in blk.sub_scales().into_iter().enumerate() {
            let g = 16 * sb + k;
            let i = isum(&q[16 * k..16 * (k + 1)], &a.q[16 * g..16 * (g + 1)]);
            s += d * a.dx[g / 2] * i as f32;
        }
        sum += s;
    }
    sum
}
