//! Fast dequantize for the prefill path: the same bits as [`crate::dequantize`], vectorised.

use gguf::GgmlType;

use super::Isa;
use crate::QuantError;

/// Dequantizes `src` (a whole number of blocks of `ty`) into `dst` like [`crate::dequantize`], with
/// the same result bit for bit, using the vector kernel for `ty` where this CPU has one. Errors (never
/// panics) on a length mismatch or an unsupported type.
pub fn dequantize_fast(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    dequantize_fast_with(Isa::best(), ty, src, dst)
}

/// [`dequantize_fast`] on the instruction set `isa` (an error if this CPU lacks it); types without a
/// kernel there use the scalar [`crate::dequantize`].
pub fn dequantize_fast_with(
    isa: Isa,
    ty: GgmlType,
    src: &[u8],
    dst: &mut [f32],
) -> Result<(), QuantError> {
    if !isa.is_available() {
        let op = crate::Op::Dequantize;
        return Err(QuantError::Unsupported { ty, op });
    }
    // The scalar path checks every length and type; run it on nothing to reuse those checks.
    check(ty, src, dst)?;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => {
            if let Some(k) = super::x86_dequant::kernel(ty) {
                // SAFETY: AVX2/FMA/F16C are present; `src` is whole blocks matching `dst` (checked).
                unsafe { k(src, dst) };
                return Ok(());
            }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            if let Some(k) = super::neon::dequant_kernel(ty) {
                // SAFETY: NEON is present; `src` is whole blocks matching `dst` (checked).
                unsafe { k(src, dst) };
                return Ok(());
            }
        }
        _ => {}
    }
    crate::dequantize(ty, src, dst)
}

/// The length and type checks of [`crate::dequantize`].
fn check(ty: GgmlType, src: &[u8], dst: &[f32]) -> Result<(), QuantError> {
    crate::checked(ty, crate::Op::Dequantize, src, "destination", dst.len()).map(drop)
}

/// Whether `isa` has a vector dequantize kernel for `ty`.
pub(super) fn has_kernel(isa: Isa, ty: GgmlType) -> bool {
    let _ = ty;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => super::x86_dequant::kernel(ty).is_some(),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => super::neon::dequant_kernel(ty).is_some(),
        _ => false,
    }
}
