//! Matvec for float weights (F32, F16, BF16): f32 products accumulated with FMA (no activation
//! quantization: these formats take the exact path).

use gguf::GgmlType;

use crate::simd::Isa;
use crate::{Op, QuantError};

/// Whether [`matvec_f32`] accepts `ty`.
pub fn supports_f32(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// `y[r] = row r · x` for float weights `ty` (F32, F16 or BF16): `y.len()` rows of `row_bytes` bytes
/// packed in `rows` (`rows.len() == y.len() * row_bytes`), each holding exactly `x.len()` weights.
/// Errors (never panics) on another type or inconsistent lengths.
pub fn matvec_f32(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    matvec_f32_with(Isa::best(), ty, rows, row_bytes, x, y)
}

/// [`matvec_f32`] on the instruction set `isa` (an error if this CPU lacks it). The scalar path is
/// `quant::dot` per row.
pub fn matvec_f32_with(
    isa: Isa,
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    let op = Op::Dot;
    if !supports_f32(ty) || !isa.is_available() {
        return Err(QuantError::Unsupported { ty, op });
    }
    let expected = x.len() * ty.type_size() as usize;
    QuantError::check_length(ty, op, "row", "bytes", row_bytes, expected)?;
    let expected = y.len().saturating_mul(row_bytes);
    QuantError::check_length(ty, op, "rows", "bytes", rows.len(), expected)?;
    if x.is_empty() {
        y.fill(0.0);
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx2 | Isa::Avx512) {
        use crate::simd::x86::{FloatKind, matvec_f32_rows};
        let kind = match ty {
            GgmlType::F32 => FloatKind::F32,
            GgmlType::F16 => FloatKind::F16,
            _ => FloatKind::Bf16,
        };
        // SAFETY: AVX2, FMA and F16C are present (`isa` is available); the kernel asserts lengths.
        unsafe { matvec_f32_rows(kind, rows, row_bytes, x, y) };
        return Ok(());
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: NEON is present; lengths were checked above.
        unsafe { crate::simd::neon::matvec_f32_rows(ty, rows, row_bytes, x, y) };
        return Ok(());
    }
    for (row, y) in rows.chunks_exact(row_bytes).zip(y) {
        *y = crate::dot(ty, row, x)?;
    }
    Ok(())
}
