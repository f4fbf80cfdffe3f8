//! [`Q16Acts`]: activations quantized to i16 in blocks of 32, with the per-block sums the kernels need.

use gguf::GgmlType;

use crate::simd::Isa;
use crate::{Op, QuantError};

/// Activations per q16 block.
pub const QK16: usize = 32;

/// Largest quant magnitude: `dx = max|x| / Q16_MAX`.
const Q16_MAX: f32 = 32767.0;

/// Blocks whose largest magnitude is smaller quantize to zero.
const MIN_AMAX: f32 = 1e-30;

/// Activations quantized for [`matvec_q16`](super::matvec_q16): for each block `b` of 32 values with
/// largest magnitude `amax`, `dx[b] = amax / 32767` and `q[i] = round_ties_even(x[i] * (32767 / amax))`
/// as i16 (|q| <= 32767), or `dx[b] = 0` and all-zero quants when `amax < 1e-30`; `sx[b] = Σ x[i]`
/// over the original f32 values, and `isum16[k] = Σ q[i]` over each run of 16 values (exact, in i32).
///
/// `x[i] ≈ q[i] * dx[b]` with an error of at most about `dx[b] / 2` (2^-16 of the block's largest
/// magnitude), about 100 times finer than f16.
#[derive(Clone, Debug, Default)]
pub struct Q16Acts {
    pub(crate) q: Vec<i16>,
    pub(crate) dx: Vec<f32>,
    pub(crate) sx: Vec<f32>,
    pub(crate) isum16: Vec<i32>,
}

impl Q16Acts {
    /// Empty activations (length 0); buffers grow on the first [`quantize`](Self::quantize).
    pub fn new() -> Self {
        Self::default()
    }

    /// Re-quantizes `x` in place, reusing the buffers. Errors if `x.len()` is not a multiple of 32 or
    /// `x` holds a NaN or an infinity; the activations are then empty (length 0).
    ///
    /// The errors are reported as quantizing to [`GgmlType::I16`]: [`QuantError::NotWholeBlocks`]
    /// for the length, and for a non-finite value [`QuantError::Length`] with `what` = "finite
    /// activations", `got` = the index of the first non-finite value and `expected` = `x.len()`.
    ///
    /// The result does not depend on the CPU: the vectorised path runs the same f32 operations in the
    /// same order as the portable one (`sx` is summed in 8 interleaved lanes, then pairwise).
    pub fn quantize(&mut self, x: &[f32]) -> Result<(), QuantError> {
        self.quantize_with(Isa::best(), x)
    }

    /// [`quantize`](Self::quantize) on the instruction set `isa` (the same result on every one; tests
    /// compare them). An `isa` this CPU lacks runs the portable code.
    pub fn quantize_with(&mut self, isa: Isa, x: &[f32]) -> Result<(), QuantError> {
        self.size_for(x)?;
        let finite = quantize_dispatch(isa, x, self.parts());
        if !finite {
            return Err(self.not_finite(x));
        }
        Ok(())
    }

    /// [`quantize`](Self::quantize) in pieces that may run on several threads: `x` is split into
    /// jobs of `chunk` values (rounded up to a multiple of 32; the last may be shorter), handed to
    /// `run`, which must [`run`](QuantizeJob::run) every one (in any order, on any thread) and return
    /// whether all of them returned `true`. The result is the same as [`quantize`](Self::quantize)'s,
    /// errors included.
    pub fn quantize_split(
        &mut self,
        x: &[f32],
        chunk: usize,
        run: impl FnOnce(Vec<QuantizeJob<'_>>) -> bool,
    ) -> Result<(), QuantError> {
        self.size_for(x)?;
        let chunk = chunk.max(1).next_multiple_of(QK16);
        let isa = Isa::best();
        let jobs: Vec<QuantizeJob<'_>> = x
            .chunks(chunk)
            .zip(self.q.chunks_mut(chunk))
            .zip(self.dx.chunks_mut(chunk / QK16))
            .zip(self.sx.chunks_mut(chunk / QK16))
            .zip(self.isum16.chunks_mut(chunk / 16))
            .map(|((((x, q), dx), sx), isum16)| QuantizeJob {
                isa,
                x,
                parts: Parts { q, dx, sx, isum16 },
            })
            .collect();
        if !run(jobs) {
            return Err(self.not_finite(x));
        }
        Ok(())
    }

    /// Sizes the buffers for `x` (whole blocks of 32, else an error and cleared buffers). Every
    /// element is overwritten by the quantizer: resizing without clearing skips a memset.
    fn size_for(&mut self, x: &[f32]) -> Result<(), QuantError> {
        if !x.len().is_multiple_of(QK16) {
            self.clear();
            let (ty, op, unit, got, block) = (GgmlType::I16, Op::Quantize, "values", x.len(), QK16);
            return Err(QuantError::NotWholeBlocks {
                ty,
                op,
                unit,
                got,
                block,
            });
        }
        let n = x.len();
        self.q.resize(n, 0);
        self.dx.resize(n / QK16, 0.0);
        self.sx.resize(n / QK16, 0.0);
        self.isum16.resize(n / 16, 0);
        Ok(())
    }

    /// The error for `x` holding a NaN or infinity (the buffers are cleared).
    fn not_finite(&mut self, x: &[f32]) -> QuantError {
        let index = x.iter().position(|v| !v.is_finite()).unwrap_or(0);
        self.clear();
        let (ty, op, what, unit) = (GgmlType::I16, Op::Quantize, "finite activations", "values");
        let (got, expected) = (index, x.len());
        QuantError::Length {
            ty,
            op,
            what,
            unit,
            got,
            expected,
        }
    }

    /// Number of activations.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether there are no activations.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The quants, one per activation.
    pub fn q(&self) -> &[i16] {
        &self.q
    }

    /// Per block of 32: the step `dx` (`x ≈ q * dx`).
    pub fn dx(&self) -> &[f32] {
        &self.dx
    }

    /// Per block of 32: the sum of the original activations.
    pub fn sx(&self) -> &[f32] {
        &self.sx
    }

    /// Per run of 16: the exact sum of the quants.
    pub fn isum16(&self) -> &[i32] {
        &self.isum16
    }

    fn parts(&mut self) -> Parts<'_> {
        Parts {
            q: &mut self.q,
            dx: &mut self.dx,
            sx: &mut self.sx,
            isum16: &mut self.isum16,
        }
    }

    fn clear(&mut self) {
        self.q.clear();
        self.dx.clear();
        self.sx.clear();
        self.isum16.clear();
    }
}

/// One piece of a [`Q16Acts::quantize_split`]: some whole blocks of the input and their outputs.
#[derive(Debug)]
pub struct QuantizeJob<'a> {
    isa: Isa,
    x: &'a [f32],
    parts: Parts<'a>,
}

impl QuantizeJob<'_> {
    /// Quantizes this piece; returns whether all its values were finite.
    pub fn run(self) -> bool {
        quantize_dispatch(self.isa, self.x, self.parts)
    }
}

/// The output buffers for some whole blocks, sized for them.
#[derive(Debug)]
struct Parts<'a> {
    q: &'a mut [i16],
    dx: &'a mut [f32],
    sx: &'a mut [f32],
    isum16: &'a mut [i32],
}

fn quantize_dispatch(isa: Isa, x: &[f32], a: Parts<'_>) -> bool {
    let _ = isa;
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx2 | Isa::Avx512) && isa.is_available() {
        // SAFETY: AVX2, FMA and F16C are present (checked just above).
        return unsafe { quantize_avx2(x, a) };
    }
    quantize_blocks(x, a)
}

/// Quantizes every block; returns whether all values were finite. Buffers are already sized.
fn quantize_blocks(x: &[f32], a: Parts<'_>) -> bool {
    let (xs, _) = x.as_chunks::<QK16>();
    let (qs, _) = a.q.as_chunks_mut::<QK16>();
    let (is, _) = a.isum16.as_chunks_mut::<2>();
    let mut finite = true;
    for ((((x, q), dx), sx), is) in xs
        .iter()
        .zip(qs)
        .zip(a.dx.iter_mut())
        .zip(a.sx.iter_mut())
        .zip(is)
    {
        let mut amax = 0.0f32;
        let mut lanes = [0.0f32; 8];
        for c in x.as_chunks::<8>().0 {
            for j in 0..8 {
                let v = c[j].abs();
                // `v <= MAX` is false for NaN and infinities.
                finite &= v <= f32::MAX;
                amax = if v > amax { v } else { amax };
                lanes[j] += c[j];
            }
        }
        let l = &lanes;
        *sx = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        let id = step(amax, dx);
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (v * id).round_ties_even().clamp(-Q16_MAX, Q16_MAX) as i16;
        }
        is[0] = q[..16].iter().map(|&v| i32::from(v)).sum();
        is[1] = q[16..].iter().map(|&v| i32::from(v)).sum();
    }
    finite
}

/// Sets the step `dx` of a block whose largest magnitude is `amax` and returns the factor
/// `32767 / amax` its values are multiplied by; blocks below [`MIN_AMAX`] (all zero, or so small the
/// factor would overflow) get a zero step and factor, hence all-zero quants.
#[inline(always)]
fn step(amax: f32, dx: &mut f32) -> f32 {
    if amax >= MIN_AMAX {
        *dx = amax / Q16_MAX;
        Q16_MAX / amax
    } else {
        *dx = 0.0;
        0.0
    }
}

/// [`quantize_blocks`] with AVX2: the same f32 operations in the same order (the lane sums of `sx`
/// are combined in the same tree), so the results are identical for finite input.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_avx2(x: &[f32], a: Parts<'_>) -> bool {
    use std::arch::x86_64::*;
    let (xs, _) = x.as_chunks::<QK16>();
    let (qs, _) = a.q.as_chunks_mut::<QK16>();
    let (is, _) = a.isum16.as_chunks_mut::<2>();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let fmax = _mm256_set1_ps(f32::MAX);
    let (lo, hi) = (_mm256_set1_ps(-Q16_MAX), _mm256_set1_ps(Q16_MAX));
    let mut ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for ((((x, q), dx), sx), is) in xs
        .iter()
        .zip(qs)
        .zip(a.dx.iter_mut())
        .zip(a.sx.iter_mut())
        .zip(is)
    {
        // SAFETY: `x` is an array of 32 f32.
        let v: [__m256; 4] =
            std::array::from_fn(|c| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * c)) });
        let mut m = _mm256_setzero_ps();
        let mut lanes = _mm256_setzero_ps();
        for &v in &v {
            let av = _mm256_and_ps(v, abs);
            ok = _mm256_and_ps(ok, _mm256_cmp_ps::<_CMP_LE_OQ>(av, fmax));
            m = _mm256_max_ps(m, av);
            lanes = _mm256_add_ps(lanes, v);
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        *sx = crate::simd::x86::hsum(lanes);
        let id = _mm256_set1_ps(step(amax, dx));
        let r: [__m256i; 4] = v.map(|v| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v, id),
            );
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        });
        for (h, is) in is.iter_mut().enumerate() {
            let (r0, r1) = (r[2 * h], r[2 * h + 1]);
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(r0, r1));
            // SAFETY: `q` is an array of 32 i16; this writes 16 of them.
            unsafe { _mm256_storeu_si256(q.as_mut_ptr().add(16 * h).cast(), packed) };
            let s = _mm256_add_epi32(r0, r1);
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            *is = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
        }
    }
    _mm256_movemask_ps(ok) == 0xff
}
