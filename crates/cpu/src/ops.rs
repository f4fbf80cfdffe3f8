//! Scalar element-wise operations of a decoder block. These are the reference the SIMD and GPU
//! kernels are tested against; they favour exactness (f64 reductions where it is cheap). The
//! exceptions are [`swiglu`] and [`geglu`], which run `quant::simd::swiglu` / `geglu` (a
//! vectorised exp within ~1 ulp of libm's; their scalar twins are `quant::simd::*_scalar`).
//! Long inputs (prefill) are split across the rayon pool by the row-wise and element-wise ops
//! below; results do not change.

use model::RopeStyle;

/// Elements from which the row-wise operations below split across the rayon pool (prefill);
/// decode's single rows stay on the calling thread.
const PAR_MIN: usize = 1 << 16;

/// `out = x / sqrt(mean(x^2) + eps) * w`, row by row over rows of `w.len()` elements.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    use rayon::prelude::*;
    let n = w.len();
    if n == 0 {
        return;
    }
    let row = |(xr, or): (&[f32], &mut [f32])| {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * g;
        }
    };
    if x.len() < PAR_MIN {
        x.chunks_exact(n).zip(out.chunks_exact_mut(n)).for_each(row);
    } else {
        x.par_chunks_exact(n)
            .zip(out.par_chunks_exact_mut(n))
            .for_each(row);
    }
}

/// [`rms_norm`] in place: each row of `w.len()` elements of `x` (per-head q/k norms, the
/// post-attention and post-FFN norms).
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    if n == 0 {
        return;
    }
    use rayon::prelude::*;
    let row = |xr: &mut [f32]| {
        let scale = rms_scale(xr, eps);
        for (v, &g) in xr.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    };
    if x.len() < PAR_MIN {
        x.chunks_exact_mut(n).for_each(row);
    } else {
        x.par_chunks_exact_mut(n).for_each(row);
    }
}

/// 1 / sqrt(mean(x^2) + eps), summed in f64.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32
}

/// Adds `b` to every row of `x` (rows of `b.len()`).
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (v, &c) in row.iter_mut().zip(b) {
            *v += c;
        }
    }
}

/// `x += y`.
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    use rayon::prelude::*;
    let add = |(x, y): (&mut [f32], &[f32])| {
        for (a, &b) in x.iter_mut().zip(y) {
            *a += b;
        }
    };
    if x.len() < PAR_MIN {
        add((x, y));
    } else {
        x.par_chunks_mut(PAR_MIN / 2)
            .zip(y.par_chunks(PAR_MIN / 2))
            .for_each(add);
    }
}

/// `g = silu(g) * u` (SwiGLU), in place on the gate (over the common length).
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    glu(g, u, quant::simd::swiglu);
}

/// `g = gelu_tanh(g) * u` (GeGLU, GELU's tanh form as gemma's `gelu_pytorch_tanh`), in place on
/// the gate (over the common length), through `quant::simd::geglu`.
pub fn geglu(g: &mut [f32], u: &[f32]) {
    glu(g, u, quant::simd::geglu);
}

/// `kernel(g, u)` over the common length, split across the rayon pool for long inputs.
fn glu(g: &mut [f32], u: &[f32], kernel: fn(&mut [f32], &[f32])) {
    use rayon::prelude::*;
    let n = g.len().min(u.len());
    let (g, u) = (&mut g[..n], &u[..n]);
    if g.len() < PAR_MIN {
        return kernel(g, u);
    }
    g.par_chunks_mut(PAR_MIN / 2)
        .zip(u.par_chunks(PAR_MIN / 2))
        .for_each(|(g, u)| kernel(g, u));
}

/// `v = c * tanh(v / c)` (gemma2's soft-capping of attention scores and logits), in place.
pub fn softcap(v: &mut [f32], c: f32) {
    use rayon::prelude::*;
    let run = |v: &mut [f32]| v.iter_mut().for_each(|x| *x = c * (*x / c).tanh());
    if v.len() < PAR_MIN {
        run(v);
    } else {
        v.par_chunks_mut(PAR_MIN / 2).for_each(run);
    }
}

/// What a family does to the head's output: granite's `1 / logit_scale`, gemma2's soft-capping.
pub fn finish_logits(logits: &mut [f32], hp: &model::HParams) {
    if let Some(s) = hp.logit_mul {
        logits.iter_mut().for_each(|v| *v *= s);
    }
    if let Some(c) = hp.final_softcap {
        softcap(logits, c);
    }
}

/// Rotary embedding tables for a model: the angle per position is `pos * freq[i]`.
#[derive(Clone, Debug)]
pub struct Rope {
    pub style: RopeStyle,
    pub n_rot: usize,
    /// n_rot/2 angular frequencies, with llama3 divisors and linear scaling applied.
    pub freqs: Vec<f64>,
}

impl Rope {
    pub fn new(hp: &model::HParams, factors: Option<&[f32]>) -> Rope {
        Rope::with_base(hp, hp.rope_base, hp.rope_freq_scale, factors)
    }

    /// The table of sliding-window layers (`rope_base_swa` scaled by `rope_freq_scale_swa`),
    /// when the model has any.
    pub fn sliding(hp: &model::HParams) -> Option<Rope> {
        (hp.swa_window > 0)
            .then(|| Rope::with_base(hp, hp.rope_base_swa, hp.rope_freq_scale_swa, None))
    }

    fn with_base(hp: &model::HParams, base: f64, scale: f64, factors: Option<&[f32]>) -> Rope {
        let half = hp.n_rot / 2;
        let freqs = (0..half)
            .map(|i| {
                let b = base.powf(-2.0 * i as f64 / hp.n_rot as f64);
                let div = factors
                    .and_then(|f| f.get(i))
                    .map_or(1.0, |&f| f64::from(f));
                b / div * scale
            })
            .collect();
        Rope {
            style: hp.rope_style,
            n_rot: hp.n_rot,
            freqs,
        }
    }

    /// Rotates each head (of `head_dim` elements) of one token's vector at position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let half = self.n_rot / 2;
        let cs: Vec<(f32, f32)> = self
            .freqs
            .iter()
            .map(|&f| {
                let t = pos as f64 * f;
                (t.cos() as f32, t.sin() as f32)
            })
            .collect();
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cs.iter().enumerate().take(half) {
                let (a, b) = match self.style {
                    RopeStyle::Normal => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }
}

/// Log-softmax in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&v| f64::from(v) - lse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_styles_rotate_the_right_pairs() {
        let mut hp_freqs = Rope {
            style: RopeStyle::Normal,
            n_rot: 4,
            freqs: vec![1.0, 0.5],
        };
        let mut x = vec![1.0, 0.0, 1.0, 0.0];
        hp_freqs.apply(&mut x, 4, 1);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6);
        assert!((x[2] - 0.5f32.cos()).abs() < 1e-6 && (x[3] - 0.5f32.sin()).abs() < 1e-6);
        hp_freqs.style = RopeStyle::Neox;
        let mut y = vec![1.0, 1.0, 0.0, 0.0];
        hp_freqs.apply(&mut y, 4, 1);
        assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[2] - 1f32.sin()).abs() < 1e-6);
        assert!((y[1] - 0.5f32.cos()).abs() < 1e-6 && (y[3] - 0.5f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn log_softmax_normalises() {
        let lp = log_softmax(&[1.0, 2.0, 3.0, -1e30]);
        let total: f64 = lp.iter().map(|v| v.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }

    #[test]
    fn rms_norm_unit_rows() {
        let x = [3.0, 4.0, 0.0, 0.0];
        let mut out = [0.0; 4];
        rms_norm(&x, &[1.0, 1.0, 1.0, 1.0], 0.0, &mut out);
        let rms = (25.0f32 / 4.0).sqrt();
        assert!((out[0] - 3.0 / rms).abs() < 1e-6);
    }
}
