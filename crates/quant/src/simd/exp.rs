//! A vectorised `exp` for softmax, SwiGLU and GeGLU: range reduction `x = n ln2 + r` (`|r| <= ln2 / 2`,
//! `ln2` split in two parts), the classic degree-7 minimax polynomial for `e^r` (Cephes' `expf`
//! coefficients, about 1 ulp), and `2^n` built in the exponent bits. Inputs are clamped to
//! [-87.3, 88.3], so results stay normal and finite (below -87.3 the true value is under 1.2e-38).
//!
//! [`exp_scalar`] is the reference: the AVX-512 and AVX2 kernels run the same f32 operations (FMA
//! where it uses `mul_add`) per element, so each exponential is bit-identical; only the order of
//! [`softmax_exp`]'s sum differs.

use super::Isa;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const LO: f32 = -87.3;
const HI: f32 = 88.3;
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `e^x` (clamped as in the module docs), the scalar reference of the vector kernels.
#[inline]
pub fn exp_scalar(x: f32) -> f32 {
    let x = x.clamp(LO, HI);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let z = r * r;
    let mut p = P[0];
    for &c in &P[1..] {
        p = p.mul_add(r, c);
    }
    let e = p.mul_add(z, r) + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `v[i] = e^(v[i] - max)`, returning the sum of the new values (softmax numerators).
pub fn softmax_exp(v: &mut [f32], max: f32) -> f32 {
    softmax_exp_with(Isa::best(), v, max)
}

/// [`softmax_exp`] on the instruction set `isa` (the portable code where this CPU lacks it or
/// there is no kernel for it).
pub fn softmax_exp_with(isa: Isa, v: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa.is_available() {
        if isa == Isa::Avx512 {
            // SAFETY: AVX-512 F is present.
            return unsafe { x86::softmax_exp512(v, max) };
        }
        if isa == Isa::Avx2 {
            // SAFETY: AVX2 and FMA are present.
            return unsafe { x86::softmax_exp256(v, max) };
        }
    }
    let _ = isa;
    softmax_exp_scalar(v, max)
}

/// The scalar twin of [`softmax_exp`] (summed in order).
pub fn softmax_exp_scalar(v: &mut [f32], max: f32) -> f32 {
    let mut sum = 0.0f32;
    for s in v {
        *s = exp_scalar(*s - max);
        sum += *s;
    }
    sum
}

/// `g[i] = g[i] / (1 + e^-g[i]) * u[i]` (SiLU of the gate times the up projection), in place;
/// lengths must match, else this panics.
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    swiglu_with(Isa::best(), g, u);
}

/// [`swiglu`] on the instruction set `isa` (the portable code where this CPU lacks it or there is
/// no kernel for it).
pub fn swiglu_with(isa: Isa, g: &mut [f32], u: &[f32]) {
    glu_with(isa, g, u, false);
}

/// SwiGLU (`gelu` false) or GeGLU on the instruction set `isa`; lengths must match.
fn glu_with(isa: Isa, g: &mut [f32], u: &[f32], gelu: bool) {
    assert_eq!(g.len(), u.len(), "swiglu/geglu: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if isa.is_available() {
        // SAFETY (both arms): the instruction set `isa` names is present; lengths are equal.
        if isa == Isa::Avx512 {
            return unsafe { x86::glu512(g, u, gelu) };
        }
        if isa == Isa::Avx2 {
            return unsafe { x86::glu256(g, u, gelu) };
        }
    }
    let _ = isa;
    if gelu {
        geglu_scalar(g, u)
    } else {
        swiglu_scalar(g, u)
    }
}

/// The scalar twin of [`swiglu`].
pub fn swiglu_scalar(g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "swiglu: lengths differ");
    for (a, &b) in g.iter_mut().zip(u) {
        *a = *a / (1.0 + exp_scalar(-*a)) * b;
    }
}

/// `-2 sqrt(2 / pi)`: GELU's tanh form is `x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))`, so
/// GeGLU is SwiGLU with `x` scaled by `-GELU_K (1 + 0.044715 x^2)` inside the exponential.
const GELU_K: f32 = -1.595_769_2;
const GELU_C: f32 = 0.044_715;

/// `g[i] = gelu_tanh(g[i]) * u[i]` (GELU's tanh form of the gate times the up projection, as
/// `x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3)))`), in place; lengths must match, else this
/// panics.
pub fn geglu(g: &mut [f32], u: &[f32]) {
    geglu_with(Isa::best(), g, u);
}

/// [`geglu`] on the instruction set `isa` (the portable code where this CPU lacks it).
pub fn geglu_with(isa: Isa, g: &mut [f32], u: &[f32]) {
    glu_with(isa, g, u, true);
}

/// The exponent of [`geglu`]'s sigmoid for gate value `x`.
#[inline]
fn gelu_arg(x: f32) -> f32 {
    (x * GELU_K) * GELU_C.mul_add(x * x, 1.0)
}

/// The scalar twin of [`geglu`].
pub fn geglu_scalar(g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "geglu: lengths differ");
    for (a, &b) in g.iter_mut().zip(u) {
        *a = *a / (1.0 + exp_scalar(gelu_arg(*a))) * b;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{GELU_C, GELU_K, HI, LN2_HI, LN2_LO, LO, LOG2E, P, exp_scalar, gelu_arg};

    /// Generates the exp, softmax and SwiGLU kernels for one vector width.
    macro_rules! kernels {
        ($feat:literal, $w:literal, $v:ty, $exp:ident, $softmax:ident, $glu:ident,
         set1 = $set1:ident, min = $min:ident, max = $max:ident, mul = $mul:ident,
         add = $add:ident, div = $div:ident, fma = $fma:ident, round = $round:expr,
         cvt = $cvt:ident, addi = $addi:ident, set1i = $set1i:ident, slli = $slli:ident,
         cast = $cast:ident, load = $load:ident, store = $store:ident, zero = $zero:ident,
         sub = $sub:ident) => {
            #[inline]
            #[target_feature(enable = $feat)]
            fn $exp(x: $v) -> $v {
                let x = $min($max(x, $set1(LO)), $set1(HI));
                let n = $round($mul(x, $set1(LOG2E)));
                let r = $fma(n, $set1(-LN2_HI), x);
                let r = $fma(n, $set1(-LN2_LO), r);
                let z = $mul(r, r);
                let mut p = $set1(P[0]);
                for &c in &P[1..] {
                    p = $fma(p, r, $set1(c));
                }
                let e = $add($fma(p, z, r), $set1(1.0));
                let bits = $slli::<23>($addi($cvt(n), $set1i(127)));
                $mul(e, $cast(bits))
            }

            /// # Safety
            /// The CPU has the target features.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $softmax(v: &mut [f32], max: f32) -> f32 {
                let (chunks, tail) = v.as_chunks_mut::<$w>();
                let m = $set1(max);
                let mut acc = $zero();
                for c in chunks {
                    // SAFETY: `c` is an array of the vector's width.
                    unsafe {
                        let e = $exp($sub($load(c.as_ptr()), m));
                        $store(c.as_mut_ptr(), e);
                        acc = $add(acc, e);
                    }
                }
                let mut lanes = [0.0f32; $w];
                // SAFETY: `lanes` holds one vector.
                unsafe { $store(lanes.as_mut_ptr(), acc) };
                let mut sum: f32 = lanes.iter().sum();
                for s in tail {
                    *s = exp_scalar(*s - max);
                    sum += *s;
                }
                sum
            }

            /// SwiGLU, or GeGLU with `gelu` (the exponent `gelu_arg(x)` in place of `-x`).
            ///
            /// # Safety
            /// The CPU has the target features; `g.len() == u.len()`.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $glu(g: &mut [f32], u: &[f32], gelu: bool) {
                assert_eq!(g.len(), u.len());
                let (gc, gt) = g.as_chunks_mut::<$w>();
                let (uc, ut) = u.as_chunks::<$w>();
                let one = $set1(1.0);
                for (g, u) in gc.iter_mut().zip(uc) {
                    // SAFETY: both are arrays of the vector's width.
                    unsafe {
                        let x = $load(g.as_ptr());
                        let e = if gelu {
                            // The f32 operations of `gelu_arg`, in its order.
                            let s = $fma($set1(GELU_C), $mul(x, x), one);
                            $mul($mul(x, $set1(GELU_K)), s)
                        } else {
                            $sub($zero(), x)
                        };
                        let y = $mul($div(x, $add(one, $exp(e))), $load(u.as_ptr()));
                        $store(g.as_mut_ptr(), y);
                    }
                }
                for (a, &b) in gt.iter_mut().zip(ut) {
                    let e = if gelu { gelu_arg(*a) } else { -*a };
                    *a = *a / (1.0 + exp_scalar(e)) * b;
                }
            }
        };
    }

    kernels!(
        "avx512f",
        16,
        __m512,
        exp512,
        softmax_exp512,
        glu512,
        set1 = _mm512_set1_ps,
        min = _mm512_min_ps,
        max = _mm512_max_ps,
        mul = _mm512_mul_ps,
        add = _mm512_add_ps,
        div = _mm512_div_ps,
        fma = _mm512_fmadd_ps,
        round = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>,
        cvt = _mm512_cvtps_epi32,
        addi = _mm512_add_epi32,
        set1i = _mm512_set1_epi32,
        slli = _mm512_slli_epi32,
        cast = _mm512_castsi512_ps,
        load = _mm512_loadu_ps,
        store = _mm512_storeu_ps,
        zero = _mm512_setzero_ps,
        sub = _mm512_sub_ps
    );

    kernels!(
        "avx2,fma",
        8,
        __m256,
        exp256,
        softmax_exp256,
        glu256,
        set1 = _mm256_set1_ps,
        min = _mm256_min_ps,
        max = _mm256_max_ps,
        mul = _mm256_mul_ps,
        add = _mm256_add_ps,
        div = _mm256_div_ps,
        fma = _mm256_fmadd_ps,
        round = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>,
        cvt = _mm256_cvtps_epi32,
        addi = _mm256_add_epi32,
        set1i = _mm256_set1_epi32,
        slli = _mm256_slli_epi32,
        cast = _mm256_castsi256_ps,
        load = _mm256_loadu_ps,
        store = _mm256_storeu_ps,
        zero = _mm256_setzero_ps,
        sub = _mm256_sub_ps
    );
}
