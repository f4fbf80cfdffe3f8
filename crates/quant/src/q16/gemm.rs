//! The q16 GEMM: many activation rows (tokens) times weight rows decoded into [`Panels`].
//!
//! `out[t][r] = Σ_g scale[r][g] * dx[t][b] * (Σ_{k in g} q[r][k] * xq[t][k]) + Σ_b min[r][b] * sx[t][b]`
//! for the q16 activations of each token (blocks `b` of 32; groups `g` of 32 or 16 values inside
//! them): the same split into exact integer sums and per-block f32 scaling as the q16 matvec kernels,
//! so prefill carries the same activation rounding as decode. The integer sums run on `vpdpwssd`
//! (AVX-512 VNNI: 32 products of i16 a 512-bit instruction, twice the f32 FMA rate) or `vpmaddwd`
//! (AVX2); per group each sum is converted to f32 once and added with one FMA.
//!
//! Tiles: a kernel computes one panel (32 weight rows) for up to `nr` tokens, keeping `2 x nr`
//! integer and `2 x nr` f32 accumulators (16 rows each) in registers, and walks the whole row
//! length. The driver runs the panels outermost, so one panel (32 x k i16: 57 KB for k = 896) stays
//! in L2 while every token passes over it. Every kernel computes the same f32 operations in the same
//! order as the scalar tile [`tile_scalar`], so all instruction sets give bit-identical results.

use gguf::GgmlType;

use super::panel::{PANEL_ROWS, Panels};
use super::{Q16Acts, QK16};
use crate::simd::Isa;
use crate::{Op, QuantError};

/// Most tokens any kernel's tile holds.
pub(crate) const MAX_NR: usize = 6;

/// One tile: `out[t * 32 + i]` for tokens `t0 + t` (`t < nt`) and row `i` of panel `panel`.
///
/// # Safety
/// The CPU has the kernel's instruction set; `panel < p.panels()`, `1 <= nt <= nr` of the kernel,
/// `t0 + nt` tokens fit in `a`, and `a.len()` is a whole number of rows of `p.k` values.
pub(crate) type TileFn = unsafe fn(&Panels, usize, &Q16Acts, usize, usize, &mut [f32; MAX_NR * 32]);

/// A tile kernel and how many tokens it takes at once.
#[derive(Clone, Copy)]
pub(crate) struct Kernel {
    pub(crate) nr: usize,
    pub(crate) tile: TileFn,
}

fn kernel(isa: Isa) -> Kernel {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => super::x86_gemm::KERNEL_AVX512,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => super::x86_gemm::KERNEL_AVX2,
        _ => Kernel {
            nr: 1,
            tile: tile_scalar_fn,
        },
    }
}

/// Whether callers should run prefill through [`gemm_q16`] rather than an f32 GEMM on decoded
/// weights: on x86 with AVX2 or AVX512-VNNI. With VNNI (`vpdpwssd`) it is ~2x the f32 FMA rate on
/// Zen 4; the AVX2 tile (`vpmaddwd` + `vpaddd`, 16 rows x 6 tokens) beats the `gemm` crate's f32
/// GEMM too (an AVX2-only EPYC, 2 threads, pp512: SmolLM2 Q4_1 534 tok/s, Qwen2.5-0.5B 155; with
/// 2 tokens a tile 283 / 90, the f32 GEMM ~400 / ~120 at pp256), and its exact integer sums give
/// every row the same bits whatever the batch size (the f32 GEMM's blocking changes with the
/// number of rows), hence the same bits as an AVX-512 machine, and prefix reuse, paged caches and
/// batched serving keep their bit-identity. The scalar tile is far slower: elsewhere callers
/// keep their f32 path.
pub fn gemm_is_fast() -> bool {
    match Isa::best() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 => true,
        _ => false,
    }
}

/// `n` tokens (the rows of `a`, `p.k()` values each) times the weight rows of `p`: calls
/// `sink(t, r0, values)` with the outputs of token `t` for rows `r0..r0 + values.len()` (at most
/// 32 at a time; each output exactly once). Runs the best kernel for this CPU. Errors (never
/// panics) when `a` does not hold `n` rows of `p.k()` values.
pub fn gemm_q16(
    p: &Panels,
    a: &Q16Acts,
    n: usize,
    sink: impl FnMut(usize, usize, &[f32]),
) -> Result<(), QuantError> {
    gemm_q16_with(Isa::best(), p, a, n, sink)
}

/// [`gemm_q16`] on the instruction set `isa` (the same results on every one); errors with
/// [`QuantError::Unsupported`] if this CPU lacks it.
pub fn gemm_q16_with(
    isa: Isa,
    p: &Panels,
    a: &Q16Acts,
    n: usize,
    mut sink: impl FnMut(usize, usize, &[f32]),
) -> Result<(), QuantError> {
    let (ty, op) = (GgmlType::I16, Op::Dot);
    QuantError::check_length(
        ty,
        op,
        "activations",
        "values",
        a.len(),
        n.saturating_mul(p.k),
    )?;
    if !isa.is_available() {
        return Err(QuantError::Unsupported { ty, op });
    }
    let kern = kernel(isa);
    let mut tile = [0.0f32; MAX_NR * 32];
    for panel in 0..p.panels() {
        let r0 = panel * PANEL_ROWS;
        let valid = PANEL_ROWS.min(p.rows - r0);
        for t0 in (0..n).step_by(kern.nr) {
            let nt = kern.nr.min(n - t0);
            // SAFETY: `isa` is available; `panel` and the tokens are in range (checked above).
            unsafe { (kern.tile)(p, panel, a, t0, nt, &mut tile) };
            for t in 0..nt {
                sink(t0 + t, r0, &tile[t * PANEL_ROWS..t * PANEL_ROWS + valid]);
            }
        }
    }
    Ok(())
}

/// The pointers a tile kernel reads, for panel `panel` and tokens from `t0`.
pub(crate) struct TilePtrs {
    pub(crate) w: *const i16,
    pub(crate) scale: *const f32,
    pub(crate) min: *const f32,
    pub(crate) xq: *const i16,
    pub(crate) dx: *const f32,
    pub(crate) sx: *const f32,
    /// Values per row.
    pub(crate) k: usize,
}

impl TilePtrs {
    /// The pointers for panel `panel` and tokens `t0..t0 + nt`; panics if the buffers are shorter
    /// than those need, so every load a kernel makes for `nt` tokens stays in bounds.
    pub(crate) fn new(p: &Panels, panel: usize, a: &Q16Acts, t0: usize, nt: usize) -> Self {
        let (k, nb) = (p.k, p.k / QK16);
        let ng = p.k / p.group.max(1);
        assert!(p.q.len() >= (panel + 1) * k * PANEL_ROWS);
        assert!(p.scale.len() >= (panel + 1) * ng * PANEL_ROWS);
        assert!(!p.has_min || p.min.len() >= (panel + 1) * nb * PANEL_ROWS);
        assert!(a.q.len() >= (t0 + nt) * k && a.dx.len() >= (t0 + nt) * nb);
        assert!(a.sx.len() >= (t0 + nt) * nb);
        // `wrapping_add` keeps this safe; the asserts make the offsets in bounds.
        TilePtrs {
            w: p.q.as_ptr().wrapping_add(panel * k * PANEL_ROWS),
            scale: p.scale.as_ptr().wrapping_add(panel * ng * PANEL_ROWS),
            min: p.min.as_ptr().wrapping_add(panel * nb * PANEL_ROWS),
            xq: a.q.as_ptr().wrapping_add(t0 * k),
            dx: a.dx.as_ptr().wrapping_add(t0 * nb),
            sx: a.sx.as_ptr().wrapping_add(t0 * nb),
            k,
        }
    }
}

fn tile_scalar_fn(
    p: &Panels,
    panel: usize,
    a: &Q16Acts,
    t0: usize,
    nt: usize,
    out: &mut [f32; MAX_NR * 32],
) {
    tile_scalar(p, panel, a, t0, nt, out);
}

/// The scalar tile, the reference the vector kernels reproduce bit for bit: per row and token, per
/// group the exact integer sum, `f = fma(sum as f32, scale * dx, f)`, then per block of 32 with a
/// minimum `f = fma(min, sx, f)`.
pub(crate) fn tile_scalar(
    p: &Panels,
    panel: usize,
    a: &Q16Acts,
    t0: usize,
    nt: usize,
    out: &mut [f32; MAX_NR * 32],
) {
    let (k, nb) = (p.k, p.k / QK16);
    let halves = QK16 / p.group.max(1);
    let ng = nb * halves;
    let pairs = QK16 / 2 / halves;
    let w = &p.q[panel * k * PANEL_ROWS..(panel + 1) * k * PANEL_ROWS];
    let sc = &p.scale[panel * ng * PANEL_ROWS..(panel + 1) * ng * PANEL_ROWS];
    for t in 0..nt.min(MAX_NR) {
        let tok = t0 + t;
        let xq = &a.q[tok * k..(tok + 1) * k];
        for i in 0..PANEL_ROWS {
            let mut f = 0.0f32;
            for b in 0..nb {
                let dx = a.dx[tok * nb + b];
                for h in 0..halves {
                    let mut acc = 0i32;
                    for j in h * pairs..(h + 1) * pairs {
                        let pj = b * QK16 / 2 + j;
                        let wp = &w[pj * 2 * PANEL_ROWS + 2 * i..][..2];
                        let xp = &xq[2 * pj..2 * pj + 2];
                        acc += i32::from(wp[0]) * i32::from(xp[0])
                            + i32::from(wp[1]) * i32::from(xp[1]);
                    }
                    let s = sc[(b * halves + h) * PANEL_ROWS + i] * dx;
                    f = (acc as f32).mul_add(s, f);
                }
                if p.has_min {
                    let m = p.min[(panel * nb + b) * PANEL_ROWS + i];
                    f = m.mul_add(a.sx[tok * nb + b], f);
                }
            }
            out[t * PANEL_ROWS + i] = f;
        }
    }
}
