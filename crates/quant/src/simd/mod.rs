//! Runtime-dispatched SIMD helpers: instruction-set detection ([`Isa`]), f32 dot / axpy, and a fast
//! bit-exact dequantize for the prefill path.
//!
//! Each kernel is a `#[target_feature]` function reached only through the safe entry points here,
//! which check lengths and CPU features first; `unsafe` stays inside the kernels' raw loads.

use std::sync::OnceLock;

use gguf::GgmlType;

mod dequant;
mod exp;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_dequant;

pub use dequant::{dequantize_fast, dequantize_fast_with};
pub use exp::{
    exp_scalar, geglu, geglu_scalar, geglu_with, softmax_exp, softmax_exp_scalar, softmax_exp_with,
    swiglu, swiglu_scalar, swiglu_with,
};

/// A vector dequantize kernel over whole blocks (lengths checked by the caller; the CPU must have
/// the kernel's instruction set).
#[allow(dead_code)]
pub(crate) type DequantFn = unsafe fn(&[u8], &mut [f32]);

/// An instruction-set level the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust (the reference twins).
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
    Avx512,
    /// AArch64 with NEON.
    Neon,
}

impl Isa {
    /// Whether this CPU runs `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every level this CPU runs, narrowest first.
    pub fn available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon]
            .into_iter()
            .filter(|i| i.is_available())
            .collect()
    }

    /// The widest level this CPU runs (detected once).
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| *Isa::available().last().unwrap_or(&Isa::Scalar))
    }
}

/// `Σ a[i] * b[i]` over the common length (`a.len()` must equal `b.len()`, else this panics), with FMA
/// in several vector accumulators where the CPU has it, so the rounding differs from a sequential sum.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if Isa::best() != Isa::Scalar {
        // SAFETY: AVX2 and FMA are present (`best` is at least Avx2); lengths are equal.
        return unsafe { x86::dot_f32(a, b) };
    }
    #[cfg(target_arch = "aarch64")]
    if Isa::best() == Isa::Neon {
        // SAFETY: NEON is present; lengths are equal.
        return unsafe { neon::dot_f32(a, b) };
    }
    dot_f32_scalar(a, b)
}

/// `y[i] += a * x[i]` (`x.len()` must equal `y.len()`, else this panics), vectorised with FMA where
/// the CPU has it (so each element is rounded once instead of twice).
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    assert_eq!(x.len(), y.len(), "axpy_f32: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if Isa::best() != Isa::Scalar {
        // SAFETY: AVX2 and FMA are present; lengths are equal.
        return unsafe { x86::axpy_f32(y, a, x) };
    }
    #[cfg(target_arch = "aarch64")]
    if Isa::best() == Isa::Neon {
        // SAFETY: NEON is present; lengths are equal.
        return unsafe { neon::axpy_f32(y, a, x) };
    }
    axpy_f32_scalar(y, a, x);
}

/// The scalar twin of [`dot_f32`]: eight interleaved partial sums (multiply, then add), combined
/// pairwise.
pub fn dot_f32_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0.0f32; 8];
    let (ca, ta) = a.as_chunks::<8>();
    let (cb, tb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for j in 0..8 {
            s[j] += x[j] * y[j];
        }
    }
    let mut t = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (x, y) in ta.iter().zip(tb) {
        t += x * y;
    }
    t
}

/// The scalar twin of [`axpy_f32`] (multiply, then add: the vector kernels fuse the two).
pub fn axpy_f32_scalar(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// Whether [`dequantize_fast`] has a vectorised kernel for `ty` (others fall back to the scalar one).
pub fn has_fast_dequantize(ty: GgmlType) -> bool {
    dequant::has_kernel(Isa::best(), ty)
}
