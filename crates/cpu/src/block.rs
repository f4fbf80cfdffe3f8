//! One decoder block over `n` activation rows, shared by prefill/decode ([`crate::forward`]) and
//! batched decode ([`crate::batch`]): they differ only in how matrices are multiplied and how
//! rope, the cache store and attention are done for their rows.

use crate::error::Result;
use crate::ops::{add_bias, add_in_place, geglu, rms_norm, rms_norm_in_place, swiglu};
use crate::pool::Pool;
use gguf::GgufFile;
use model::{FfnAct, HParams, Layer, Matrix};

/// Multiplies the `n` rows of `x` by each of `ws` into `ys` (`ys[i]`: n rows of `ws[i].rows`), as
/// [`crate::matmul::matmul_many`] does.
pub(crate) type MatMany =
    fn(&Pool, &GgufFile, &[&Matrix], &[f32], usize, &mut [&mut [f32]]) -> Result<()>;

/// The working buffers of a pass over `n` rows.
pub(crate) struct Acts {
    pub h: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub att: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
}

impl Acts {
    pub fn new(hp: &HParams, n: usize) -> Acts {
        Acts {
            h: vec![0.0; n * hp.n_embd],
            q: vec![0.0; n * hp.q_dim()],
            k: vec![0.0; n * hp.kv_dim()],
            v: vec![0.0; n * hp.v_dim()],
            att: vec![0.0; n * hp.n_head * hp.head_dim_v],
            gate: vec![0.0; n * hp.n_ff],
            up: vec![0.0; n * hp.n_ff],
        }
    }
}

/// Block `l` over the `n` rows of `x` (the residual stream, updated in place): RMSNorm, q/k/v
/// (+ biases, + per-head q/k norms), then `attend` (rope, cache store and attention from `a.q`,
/// `a.k`, `a.v` into `a.att`), wo (+ its post-norm) added onto x; RMSNorm, gate/up, SwiGLU or
/// GeGLU, down (+ its post-norm) added onto x. `mm` does every matrix product.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block(
    pool: &Pool,
    f: &GgufFile,
    hp: &HParams,
    l: &Layer,
    x: &mut [f32],
    a: &mut Acts,
    n: usize,
    mm: MatMany,
    attend: impl FnOnce(&mut Acts),
) -> Result<()> {
    rms_norm(x, &l.attn_norm, hp.rms_eps, &mut a.h);
    mm(
        pool,
        f,
        &[&l.wq, &l.wk, &l.wv],
        &a.h,
        n,
        &mut [&mut a.q, &mut a.k, &mut a.v],
    )?;
    for (buf, bias) in [(&mut a.q, &l.bq), (&mut a.k, &l.bk), (&mut a.v, &l.bv)] {
        if let Some(b) = bias {
            add_bias(buf, b);
        }
    }
    for (buf, norm) in [(&mut a.q, &l.q_norm), (&mut a.k, &l.k_norm)] {
        if let Some(w) = norm {
            rms_norm_in_place(buf, w, hp.rms_eps);
        }
    }
    attend(a);
    mm(pool, f, &[&l.wo], &a.att, n, &mut [&mut a.h])?;
    add_branch(hp, x, &mut a.h, &l.post_attn_norm);

    rms_norm(x, &l.ffn_norm, hp.rms_eps, &mut a.h);
    mm(
        pool,
        f,
        &[&l.w_gate, &l.w_up],
        &a.h,
        n,
        &mut [&mut a.gate, &mut a.up],
    )?;
    match hp.ffn_act {
        FfnAct::Silu => swiglu(&mut a.gate, &a.up),
        FfnAct::GeluTanh => geglu(&mut a.gate, &a.up),
    }
    mm(pool, f, &[&l.w_down], &a.gate, n, &mut [&mut a.h])?;
    add_branch(hp, x, &mut a.h, &l.post_ffn_norm);
    Ok(())
}

/// `x += h`, with `h` (an attention or FFN output) first normed by `post` (gemma) and scaled by
/// the residual scale (granite) where the family does so.
fn add_branch(hp: &HParams, x: &mut [f32], h: &mut [f32], post: &Option<Vec<f32>>) {
    if let Some(w) = post {
        rms_norm_in_place(h, w, hp.rms_eps);
    }
    if let Some(s) = hp.residual_scale {
        h.iter_mut().for_each(|v| *v *= s);
    }
    add_in_place(x, h);
}
