//! The forward pass of a llama-family decoder on the CPU: prefill of many tokens at once, or
//! single-token decode, against a caller-held KV cache.

use crate::attention::attention;
use crate::block::{Acts, block};
use crate::error::{CpuError, Result};
use crate::kv::{CacheType, KvCache};
use crate::matmul::{matmul, matmul_many, row};
use crate::ops::{Rope, rms_norm};
use crate::paged::KvPool;
use crate::pool::Pool;
use model::Model;
use std::time::Duration;

/// How long idle decode threads poll for the next region before parking.
const DECODE_SPIN: Duration = Duration::from_micros(200);

/// [`DECODE_SPIN`], or `MOLLA_DECODE_SPIN_US` microseconds when set (for measuring the trade-off
/// between spinning and parking; docs/cpu.md has the figures).
fn decode_spin() -> Duration {
    std::env::var("MOLLA_DECODE_SPIN_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DECODE_SPIN, Duration::from_micros)
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (perplexity, tests).
    All,
}

/// Checks what every backend's forward checks before running: tokens given, each inside the
/// vocabulary, and room for them after `start` positions in a cache of `capacity`.
pub fn check_input(tokens: &[u32], start: usize, capacity: usize, n_vocab: usize) -> Result<()> {
    if tokens.is_empty() {
        return Err(CpuError::NoTokens);
    }
    if start + tokens.len() > capacity {
        return Err(CpuError::ContextFull {
            needed: start + tokens.len(),
            capacity,
        });
    }
    match tokens.iter().position(|&id| id as usize >= n_vocab) {
        Some(t) => Err(CpuError::BadToken {
            id: tokens[t],
            pos: start + t,
            vocab: n_vocab,
        }),
        None => Ok(()),
    }
}

/// A model with the per-model tables the CPU needs (rope frequencies).
pub struct CpuModel {
    pub model: Model,
    pub(crate) rope: Rope,
    /// The rope of sliding-window layers, when the model has any.
    pub(crate) rope_swa: Option<Rope>,
    /// Runs decode's short parallel regions; prefill uses rayon's pool.
    pub(crate) pool: Pool,
    /// Element type of the caches [`CpuModel::new_cache`] makes.
    cache_type: CacheType,
}

impl CpuModel {
    /// Uses as many decode threads as rayon's pool has.
    pub fn new(model: Model) -> CpuModel {
        CpuModel::with_threads(model, rayon::current_num_threads())
    }

    /// Uses `threads` decode threads (the caller included).
    pub fn with_threads(model: Model, threads: usize) -> CpuModel {
        let rope = Rope::new(&model.hp, model.rope_freqs.as_deref());
        let rope_swa = Rope::sliding(&model.hp);
        let pool = Pool::new(threads, decode_spin());
        CpuModel {
            model,
            rope,
            rope_swa,
            pool,
            cache_type: CacheType::F32,
        }
    }

    /// Token `id`'s embedding row into `out` (times sqrt(n_embd) for the families that scale it).
    pub(crate) fn embed(&self, id: u32, out: &mut [f32]) -> Result<()> {
        let m = &self.model;
        row(&m.file, &m.tok_embd, id as usize, out)?;
        if let Some(s) = m.hp.embd_scale {
            out.iter_mut().for_each(|v| *v *= s);
        }
        Ok(())
    }

    /// The rope table of layer `l` (None: the layer applies no rope).
    pub(crate) fn rope_of(&self, l: usize) -> Option<&Rope> {
        let hp = &self.model.hp;
        match (&self.rope_swa, hp.window(l)) {
            _ if !hp.ropes(l) => None,
            (Some(r), Some(_)) => Some(r),
            _ => Some(&self.rope),
        }
    }

    /// A KV cache for this model, for `capacity` positions.
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::with_type(&self.model.hp, capacity, self.cache_type)
    }

    /// A pool of `blocks` KV blocks of this model's shape and cache type, for
    /// [`KvCache::paged`] caches.
    pub fn new_kv_pool(&self, blocks: usize) -> KvPool {
        KvPool::new(&self.model.hp, self.cache_type, blocks)
    }

    /// The element type of caches made from now on (f32 by default).
    pub fn set_cache_type(&mut self, ty: CacheType) {
        self.cache_type = ty;
    }

    /// Runs `tokens` at positions `kv.len..`, appends their keys and values to `kv`, and returns
    /// logits: `n_vocab` values for the last token, or for every token with [`Logits::All`].
    pub fn forward(&self, tokens: &[u32], kv: &mut KvCache, which: Logits) -> Result<Vec<f32>> {
        let x = self.layers(tokens, kv)?;
        let (m, e, n) = (&self.model, self.model.hp.n_embd, tokens.len());
        let rows = match which {
            Logits::Last => &x[(n - 1) * e..],
            Logits::All => &x[..],
        };
        let n_out = rows.len() / e;
        let mut normed = vec![0.0f32; rows.len()];
        rms_norm(rows, &m.output_norm, m.hp.rms_eps, &mut normed);
        let mut logits = vec![0.0f32; n_out * m.hp.n_vocab];
        matmul(&self.pool, &m.file, &m.output, &normed, n_out, &mut logits)?;
        crate::ops::finish_logits(&mut logits, &m.hp);
        Ok(logits)
    }

    /// The final hidden state of every token after the output norm (`n_embd` per token), as
    /// [`CpuModel::forward`] computes them before the output matrix (embeddings).
    pub fn hidden_states(&self, tokens: &[u32], kv: &mut KvCache) -> Result<Vec<f32>> {
        let x = self.layers(tokens, kv)?;
        let mut normed = vec![0.0f32; x.len()];
        rms_norm(
            &x,
            &self.model.output_norm,
            self.model.hp.rms_eps,
            &mut normed,
        );
        Ok(normed)
    }

    /// The decoder blocks over `tokens` at positions `kv.len..`: the residual stream after the
    /// last block, `n_embd` per token; `kv` grows by the tokens.
    fn layers(&self, tokens: &[u32], kv: &mut KvCache) -> Result<Vec<f32>> {
        let m = &self.model;
        let hp = &m.hp;
        let f = &m.file;
        let n = tokens.len();
        if !kv.fits(hp) {
            return Err(CpuError::CacheShape);
        }
        let start = kv.len;
        check_input(tokens, start, kv.capacity(), hp.n_vocab)?;
        let e = hp.n_embd;
        let mut x = vec![0.0f32; n * e];
        for (t, &id) in tokens.iter().enumerate() {
            if id as usize >= hp.n_vocab {
                return Err(CpuError::BadToken {
                    id,
                    pos: start + t,
                    vocab: hp.n_vocab,
                });
            }
            self.embed(id, &mut x[t * e..(t + 1) * e])?;
        }
        kv.grow(start + n)?;
        let mut a = Acts::new(hp, n);
        for (li, l) in m.layers.iter().enumerate() {
            block(&self.pool, f, hp, l, &mut x, &mut a, n, matmul_many, |a| {
                let (qd, kd) = (hp.q_dim(), hp.kv_dim());
                if let Some(rope) = self.rope_of(li) {
                    for t in 0..n {
                        let pos = start + t;
                        rope.apply(&mut a.q[t * qd..(t + 1) * qd], hp.head_dim, pos);
                        rope.apply(&mut a.k[t * kd..(t + 1) * kd], hp.head_dim, pos);
                    }
                }
                kv.store(li, start, &a.k, &a.v);
                attention(
                    &self.pool,
                    hp,
                    &a.q,
                    kv.keys(li, start + n),
                    kv.values(li, start + n),
                    start,
                    hp.window(li),
                    &mut a.att,
                );
            })?;
        }
        kv.len = start + n;
        Ok(x)
    }
}
