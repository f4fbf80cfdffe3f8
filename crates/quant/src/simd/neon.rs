//! NEON (AArch64) f32 kernels: dot, axpy and float-weight matvec.

use std::arch::aarch64::*;

use gguf::GgmlType;

/// See [`super::dot_f32`] (over the common length).
#[target_feature(enable = "neon")]
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    // SAFETY (loads): `i + 16 <= n` (or `i + 4 <= n`) bounds every load in both slices.
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let (x, y) = unsafe {
                (
                    vld1q_f32(a.as_ptr().add(i + 4 * k)),
                    vld1q_f32(b.as_ptr().add(i + 4 * k)),
                )
            };
            *acc = vfmaq_f32(*acc, x, y);
        }
        i += 16;
    }
    while i + 4 <= n {
        let (x, y) = unsafe { (vld1q_f32(a.as_ptr().add(i)), vld1q_f32(b.as_ptr().add(i))) };
        acc[0] = vfmaq_f32(acc[0], x, y);
        i += 4;
    }
    let mut s = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    for j in i..n {
        s = a[j].mul_add(b[j], s);
    }
    s
}

/// See [`super::axpy_f32`] (over the common length).
#[target_feature(enable = "neon")]
pub(crate) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = x.len().min(y.len());
    let mut i = 0;
    // SAFETY (accesses): `i + 4 <= n` bounds every access in both slices.
    while i + 4 <= n {
        unsafe {
            let v = vfmaq_n_f32(
                vld1q_f32(y.as_ptr().add(i)),
                vld1q_f32(x.as_ptr().add(i)),
                a,
            );
            vst1q_f32(y.as_mut_ptr().add(i), v);
        }
        i += 4;
    }
    for j in i..n {
        y[j] = a.mul_add(x[j], y[j]);
    }
}

/// `y[r] = row r · x` for float weights (F32, F16, BF16); lengths checked by the caller.
#[target_feature(enable = "neon")]
pub(crate) fn matvec_f32_rows(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: &[f32],
    y: &mut [f32],
) {
    let mut w = vec![0.0f32; x.len()];
    for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
        if ty == GgmlType::F32 {
            for (w, b) in w.iter_mut().zip(row.as_chunks::<4>().0) {
                *w = f32::from_le_bytes(*b);
            }
        } else if crate::dequantize(ty, row, &mut w).is_err() {
            *y = f32::NAN;
            continue;
        }
        *y = dot_f32(&w, x);
    }
}

/// Dequantize kernels: none yet (the scalar ones are used).
pub(crate) fn dequant_kernel(ty: GgmlType) -> Option<super::DequantFn> {
    let _ = ty;
    None
}
