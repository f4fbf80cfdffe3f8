//! Causal grouped-query attention over the KV cache (scalar reference).

use crate::ops::dot_f32;
use model::HParams;
use rayon::prelude::*;

/// `q`: n rows of q_dim for positions `start..start+n`; `keys`/`values`: positions
/// `0..start+n`. Writes n rows of `n_head * head_dim_v` into `out`.
pub fn attention(hp: &HParams, q: &[f32], keys: &[f32], values: &[f32], start: usize, out: &mut [f32]) {
    let (hd, hdv, kv_dim, v_dim) = (hp.head_dim, hp.head_dim_v, hp.kv_dim(), hp.v_dim());
    let group = hp.n_head / hp.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let o_dim = hp.n_head * hdv;
    // One task per (token, head).
    out.par_chunks_mut(hdv).enumerate().for_each(|(task, o)| {
        let (t, h) = (task / hp.n_head, task % hp.n_head);
        let kvh = h / group;
        let qh = &q[t * hp.q_dim() + h * hd..][..hd];
        let end = start + t + 1;
        let mut scores: Vec<f32> = (0..end)
            .map(|p| dot_f32(qh, &keys[p * kv_dim + kvh * hd..][..hd]) * scale)
            .collect();
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let mut sum = 0.0f32;
        for s in &mut scores {
            *s = (*s - max).exp();
            sum += *s;
        }
        o.fill(0.0);
        for (p, &w) in scores.iter().enumerate() {
            let vrow = &values[p * v_dim + kvh * hdv..][..hdv];
            for (a, &b) in o.iter_mut().zip(vrow) {
                *a += w * b;
            }
        }
        for a in o.iter_mut() {
            *a /= sum;
        }
    });
    debug_assert_eq!(out.len() % o_dim, 0);
}
