//! q16: matrix-vector products of quantized weights with activations quantized to 16 bits.
//!
//! The activations `x` (f32) are quantized once per matvec into [`Q16Acts`]: blocks of 32 with a step
//! `dx = max|x| / 32767` and i16 quants, plus the block sums the formats with a minimum or an offset
//! need. Each weight block's products with the activations are then exact integer sums (`vpmaddwd` on
//! x86, `smlal` on ARM), scaled once per block in f32:
//!
//! - Q4_0 / Q5_0: `d * dx * (Σ q·xq - 8 Σ xq)` (16 for Q5_0); Q8_0: `d * dx * Σ q·xq`.
//! - Q4_1 / Q5_1: `d * dx * Σ q·xq + m * sx`.
//! - Q4_K / Q5_K: per sub-block of 32, `(d * sc) * dx * Σ q·xq - (dmin * m) * sx`.
//! - Q6_K: per group of 16, `(d * sc) * dx * (Σ q·xq - 32 Σ xq)`; Q3_K likewise with signed quants;
//!   Q2_K per group of 16 with its minimum times `dx * Σ xq`.
//!
//! The only approximation is the activations' rounding, at most about 2^-16 of each block's largest
//! magnitude per value (about 100 times finer than f16 for the block's largest values; a large
//! outlier coarsens the other 31 values of its block). On random rows (`tests/q16.rs`) the dot is
//! within ~5e-6 of an f64 dot, relative to `Σ |w·x|`, and ~8e-5 with a 300x outlier in a block;
//! ggml's 8-bit activations are ~250 times coarser.
//!
//! [`matvec_q16`] picks the best kernel for this CPU once ([`Isa::best`]); [`matvec_q16_with`] runs a
//! given instruction set (tests and benchmarks use it to compare them, the scalar one included), and
//! [`reference::dot_q16`] is the scalar twin the kernels are tested against.
//!
//! Files: `acts` (the activations), `reference` (scalar twin), `x86_legacy` (AVX2, 32-weight
//! formats), `x86_kquant` (AVX2 Q4_K, Q5_K), `x86_k16` (AVX2 Q2_K, Q3_K, Q6_K), `x86_avx512`
//! (AVX-512 VL/BW/VNNI Q5_0, Q5_1, where it beat AVX2), `neon` (AArch64), `f32s` (float
//! weights). Kernels run one row at a time and prefetch ahead (see `x86_legacy`).
//!
//! Prefill uses the same activations in a GEMM ([`gemm_q16`]): weight rows decoded once into
//! [`Panels`] of 32 rows (i16 quants, f32 scales), multiplied with many tokens at once (`gemm`,
//! `panel`, `x86_gemm`).

use gguf::GgmlType;

use crate::simd::Isa;
use crate::{Op, QuantError};

mod acts;
mod f32s;
mod gemm;
#[cfg(target_arch = "aarch64")]
mod neon;
mod panel;
mod panel_fast;
pub mod reference;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_gemm;
#[cfg(target_arch = "x86_64")]
mod x86_k16;
#[cfg(target_arch = "x86_64")]
mod x86_kquant;
#[cfg(target_arch = "x86_64")]
mod x86_legacy;

pub use acts::{Q16Acts, QK16, QuantizeJob};
pub use f32s::{matvec_f32, matvec_f32_with, supports_f32};
pub use gemm::{gemm_is_fast, gemm_q16, gemm_q16_with};
pub use panel::{PANEL_ROWS, Panels, supports_gemm};

/// Whether [`matvec_q16`] and [`reference::dot_q16`] accept weights of type `ty`.
pub fn supports_q16(ty: GgmlType) -> bool {
    reference::dot_fn(ty).is_some()
}

/// A matvec kernel: `y[r] = row r · a` for `y.len()` rows of `row_bytes` each, packed in `rows`.
///
/// # Safety
/// The CPU has the kernel's instruction set. The lengths are checked by [`check`] (kernels re-assert
/// the ones their raw loads rely on, so a wrong length panics rather than reading out of bounds).
pub(crate) type MatvecFn = unsafe fn(&[u8], usize, &Q16Acts, &mut [f32]);

/// The kernel for `ty` on `isa`, falling back to a narrower instruction set where `isa` has none.
fn kernel(isa: Isa, ty: GgmlType) -> Option<MatvecFn> {
    let k: Option<MatvecFn> = match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86_avx512::kernel(ty).or_else(|| kernel(Isa::Avx2, ty)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_legacy::kernel_avx2(ty)
            .or_else(|| x86_kquant::kernel_avx2(ty))
            .or_else(|| x86_k16::kernel_avx2(ty)),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::kernel(ty),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    k.or_else(|| reference::dot_fn(ty).map(|_| scalar_kernel(ty)))
}

/// The scalar kernel for `ty` (which must be supported): the reference dot for each row.
fn scalar_kernel(ty: GgmlType) -> MatvecFn {
    macro_rules! rows_of {
        ($t:ident) => {{
            fn run(rows: &[u8], row_bytes: usize, a: &Q16Acts, y: &mut [f32]) {
                let f = reference::dot_fn(GgmlType::$t).expect("supported");
                for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
                    *y = f(row, a);
                }
            }
            run as MatvecFn
        }};
    }
    match ty {
        GgmlType::Q4_0 => rows_of!(Q4_0),
        GgmlType::Q4_1 => rows_of!(Q4_1),
        GgmlType::Q5_0 => rows_of!(Q5_0),
        GgmlType::Q5_1 => rows_of!(Q5_1),
        GgmlType::Q8_0 => rows_of!(Q8_0),
        GgmlType::Q2_K => rows_of!(Q2_K),
        GgmlType::Q3_K => rows_of!(Q3_K),
        GgmlType::Q4_K => rows_of!(Q4_K),
        GgmlType::Q5_K => rows_of!(Q5_K),
        _ => rows_of!(Q6_K),
    }
}

/// Checks that one row of `row_bytes` bytes of `ty` covers exactly `n` activations.
pub(crate) fn check_row(ty: GgmlType, row_bytes: usize, n: usize) -> Result<(), QuantError> {
    let op = Op::Dot;
    if !supports_q16(ty) {
        return Err(QuantError::Unsupported { ty, op });
    }
    let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
    QuantError::check_whole(ty, op, "values", n, bs)?;
    QuantError::check_length(ty, op, "row", "bytes", row_bytes, n / bs * ts)
}

/// Checks a whole matvec: rows of `ty` covering `n` activations, `rows` holding exactly `m` of them.
fn check(
    ty: GgmlType,
    rows: usize,
    row_bytes: usize,
    n: usize,
    m: usize,
) -> Result<(), QuantError> {
    check_row(ty, row_bytes, n)?;
    let expected = m.saturating_mul(row_bytes);
    QuantError::check_length(ty, Op::Dot, "rows", "bytes", rows, expected)
}

/// `y[r] = row r · a` for the `y.len()` consecutive rows of `row_bytes` bytes each in `rows` (so
/// `rows.len() == y.len() * row_bytes`), each row a whole number of blocks of `ty` covering exactly
/// `a.len()` values. Runs the best kernel for this CPU. Errors (never panics) on an unsupported type or
/// inconsistent lengths.
pub fn matvec_q16(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    a: &Q16Acts,
    y: &mut [f32],
) -> Result<(), QuantError> {
    matvec_q16_with(Isa::best(), ty, rows, row_bytes, a, y)
}

/// [`matvec_q16`] on the instruction set `isa`; errors with [`QuantError::Unsupported`] if this CPU
/// lacks it. Types without a kernel for `isa` use the next narrower one (down to scalar).
pub fn matvec_q16_with(
    isa: Isa,
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    a: &Q16Acts,
    y: &mut [f32],
) -> Result<(), QuantError> {
    check(ty, rows.len(), row_bytes, a.len(), y.len())?;
    let op = Op::Dot;
    if !isa.is_available() {
        return Err(QuantError::Unsupported { ty, op });
    }
    let k = kernel(isa, ty).ok_or(QuantError::Unsupported { ty, op })?;
    if y.is_empty() || a.is_empty() {
        y.fill(0.0);
        return Ok(());
    }
    // SAFETY: `isa` is available on this CPU and the lengths were checked above.
    unsafe { k(rows, row_bytes, a, y) };
    Ok(())
}
