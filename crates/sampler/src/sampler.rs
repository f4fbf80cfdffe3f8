//! [`Sampler`]: picks the next token from a row of logits.

use std::collections::HashMap;

use crate::chain::{self, Candidates, TokenProb};
use crate::rng::Rng;
use crate::{SamplerConfig, SamplerError};

/// Largest top-k found by a single scan of the logits (larger ones sort the full set).
const SCAN_TOP_K: usize = 1024;

/// Samples tokens with llama.cpp's default chain:
///
/// logit bias → penalties → top-k → typical-p → top-p → min-p → temperature → draw.
///
/// This is `common_params_sampling::samplers` (penalties, DRY, top-n-sigma, top-k,
/// typical, top-p, min-p, XTC, temperature) preceded by the logit-bias sampler and
/// followed by `dist`, as `common_sampler_init` builds it. DRY, top-n-sigma and XTC are
/// not implemented; they are off by default in llama.cpp (`dry_multiplier = 0`,
/// `top_n_sigma = -1`, `xtc_probability = 0`), so the default chains agree. Nor are
/// mirostat, dynamic temperature and `min_keep` (all off by default).
///
/// Top-p sees untempered probabilities because temperature comes after it, as in
/// llama.cpp. With `temperature <= 0` the pick is the argmax (ties to the lowest id) of
/// the logits after bias and penalties; only typical-p (off by default) could remove
/// that token first, and then the argmax of what it keeps is taken, as llama.cpp does.
///
/// The draw uses this crate's own generator, so a seed gives the same tokens on every
/// run and platform, but not the same tokens as llama.cpp (which uses `std::mt19937`).
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    n_vocab: usize,
    rng: Rng,
    work: Vec<TokenProb>,
    counts: HashMap<u32, u32>,
}

impl Sampler {
    /// A sampler for a vocabulary of `n_vocab` tokens; fails on an invalid config.
    pub fn new(cfg: SamplerConfig, n_vocab: usize) -> Result<Self, SamplerError> {
        cfg.validate(n_vocab)?;
        let rng = cfg.seed.map_or_else(Rng::from_entropy, Rng::from_seed);
        Ok(Sampler {
            cfg,
            n_vocab,
            rng,
            work: Vec::new(),
            counts: HashMap::new(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Restarts the random stream from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Rng::from_seed(seed);
    }

    /// Picks the next token. `logits` is the last position's row (`n_vocab` entries);
    /// `history` holds the tokens so far (prompt and generated, as llama-cli feeds its
    /// sampler), of which the penalties look at the last `penalty_last_n`.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32, SamplerError> {
        let c = self.prepare(logits, history)?;
        Ok(self.draw(c))
    }

    /// The `k` of [`top_candidates`] from which [`sample`](Self::sample) draws whatever the
    /// history, when it draws from those alone: not greedy, top-k on (at most the one-pass
    /// scan's limit), no logit bias and no penalties. Then a caller that has the row's top `k`
    /// (a backend that finds them on the device) may give them to
    /// [`sample_top`](Self::sample_top) instead of the logits.
    pub fn top_k_only(&self) -> Option<usize> {
        let k = self.cfg.top_k as usize;
        (!self.is_greedy()
            && (1..=SCAN_TOP_K).contains(&k)
            && self.cfg.logit_bias.is_empty()
            && !self.penalties_apply())
        .then_some(k)
    }

    /// [`sample`](Self::sample) from `top`, the row's [`top_candidates`] for
    /// [`top_k_only`](Self::top_k_only)'s `k` (any order): the same token, and the same step
    /// of the random stream.
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> Result<u32, SamplerError> {
        let k = self.top_k_only().ok_or_else(|| {
            SamplerError::InvalidConfig(
                "sample_top without top-k alone deciding the candidates".into(),
            )
        })?;
        let mut data = std::mem::take(&mut self.work);
        data.clear();
        data.extend(
            top.iter()
                .map(|&(id, logit)| TokenProb { id, logit, p: 0.0 }),
        );
        data.retain(|t| t.logit > f32::NEG_INFINITY);
        data.sort_unstable_by(chain::by_logit_desc);
        data.truncate(k);
        if data.is_empty() {
            self.work = data;
            return Err(SamplerError::NoCandidates);
        }
        Ok(self.draw(Candidates { data, sorted: true }))
    }

    /// The draw from the prepared candidates.
    fn draw(&mut self, mut c: Candidates) -> u32 {
        let id = if self.is_greedy() {
            argmax(&c.data)
        } else {
            self.truncate(&mut c);
            if self.cfg.temperature <= 0.0 {
                argmax(&c.data)
            } else {
                chain::temperature(&mut c, self.cfg.temperature);
                chain::dist(&mut c, &mut self.rng)
            }
        };
        self.work = c.data;
        id
    }

    /// The tokens the final draw would choose from, with their probabilities (after
    /// temperature), most likely first. Does not advance the random stream. Useful for
    /// logprobs and for tests.
    pub fn candidates(
        &mut self,
        logits: &[f32],
        history: &[u32],
    ) -> Result<Vec<TokenProb>, SamplerError> {
        let mut c = self.prepare(logits, history)?;
        if self.is_greedy() {
            let id = argmax(&c.data);
            let logit = c.data.iter().find(|t| t.id == id).map_or(0.0, |t| t.logit);
            c.data = vec![TokenProb { id, logit, p: 1.0 }];
        } else {
            self.truncate(&mut c);
            chain::temperature(&mut c, self.cfg.temperature);
            chain::softmax(&mut c, true);
        }
        let out = c.data.clone();
        self.work = c.data;
        Ok(out)
    }

    fn is_greedy(&self) -> bool {
        self.cfg.temperature <= 0.0 && self.cfg.typical_p >= 1.0
    }

    /// Whether [`sample`](Self::sample) picks the highest raw logit whatever the history: greedy
    /// with no logit bias and no penalties. Then a backend may pick on its own (CUDA's
    /// `forward_pick`: the highest logit, the lowest id among equals, -inf masked, NaN and +inf
    /// refused, as here) without sending the logits back.
    pub fn is_plain_greedy(&self) -> bool {
        self.is_greedy() && self.cfg.logit_bias.is_empty() && !self.penalties_apply()
    }

    /// Whether the repeat, frequency or presence penalty changes logits (over a history window
    /// that is not empty).
    fn penalties_apply(&self) -> bool {
        let c = &self.cfg;
        c.penalty_last_n != 0
            && (c.repeat_penalty != 1.0 || c.frequency_penalty != 0.0 || c.presence_penalty != 0.0)
    }

    /// Checks the logits and builds the working set with logit bias and penalties
    /// applied and masked (-inf) tokens dropped. When only the best `k` tokens can
    /// matter (greedy, or a top-k of at most [`SCAN_TOP_K`]) the set is the top `k`,
    /// found in one pass over the logits without building a full-vocabulary set.
    fn prepare(&mut self, logits: &[f32], history: &[u32]) -> Result<Candidates, SamplerError> {
        if logits.len() != self.n_vocab {
            return Err(SamplerError::LogitsLength {
                expected: self.n_vocab,
                got: logits.len(),
            });
        }
        // a branch-free fold vectorizes; find the index only when there is one
        if logits.iter().fold(false, |bad, &l| bad | is_bad(l)) {
            let index = logits.iter().position(|&l| is_bad(l)).unwrap_or(0);
            return Err(SamplerError::BadLogit {
                index,
                value: logits[index],
            });
        }
        let overrides = self.overrides(logits, history);
        let k = if self.is_greedy() {
            1
        } else {
            self.cfg.top_k as usize
        };
        let mut data = std::mem::take(&mut self.work);
        data.clear();
        let sorted = if k > 0 && k <= SCAN_TOP_K {
            chain::top_n(logits, k + overrides.len(), &mut data);
            data.retain(|t| overrides.binary_search_by_key(&t.id, |o| o.0).is_err());
            data.extend(
                overrides
                    .iter()
                    .map(|&(id, logit)| TokenProb { id, logit, p: 0.0 }),
            );
            data.retain(|t| t.logit > f32::NEG_INFINITY);
            data.sort_unstable_by(chain::by_logit_desc);
            data.truncate(k);
            true
        } else {
            data.extend(logits.iter().enumerate().map(|(i, &logit)| TokenProb {
                id: i as u32,
                logit,
                p: 0.0,
            }));
            for &(id, logit) in &overrides {
                data[id as usize].logit = logit;
            }
            data.retain(|t| t.logit > f32::NEG_INFINITY);
            false
        };
        if let Some(&(id, logit)) = overrides
            .iter()
            .find(|o| o.1.is_nan() || o.1 == f32::INFINITY)
        {
            self.work = data;
            return Err(SamplerError::BadLogit {
                index: id as usize,
                value: logit,
            });
        }
        if data.is_empty() {
            self.work = data;
            return Err(SamplerError::NoCandidates);
        }
        Ok(Candidates { data, sorted })
    }

    /// The logits that logit bias and penalties change, as `(id, new logit)` sorted by id.
    fn overrides(&mut self, logits: &[f32], history: &[u32]) -> Vec<(u32, f32)> {
        let cfg = &self.cfg;
        let mut out: Vec<(u32, f32)> = Vec::new();
        let changed = |out: &mut Vec<(u32, f32)>, id: u32| -> usize {
            match out.binary_search_by_key(&id, |o| o.0) {
                Ok(i) => i,
                Err(i) => {
                    out.insert(i, (id, logits[id as usize]));
                    i
                }
            }
        };
        for &(id, bias) in &cfg.logit_bias {
            let i = changed(&mut out, id);
            out[i].1 += bias;
        }
        if self.penalties_apply() {
            let n = if cfg.penalty_last_n < 0 {
                history.len()
            } else {
                (cfg.penalty_last_n as usize).min(history.len())
            };
            chain::count_tokens(&history[history.len() - n..], &mut self.counts);
            for (&id, &count) in &self.counts {
                if (id as usize) < logits.len() {
                    let i = changed(&mut out, id);
                    out[i].1 = chain::penalize(out[i].1, count, cfg);
                }
            }
        }
        out
    }

    fn truncate(&self, c: &mut Candidates) {
        chain::top_k(c, self.cfg.top_k as usize);
        chain::typical(c, self.cfg.typical_p);
        chain::top_p(c, self.cfg.top_p);
        chain::min_p(c, self.cfg.min_p);
    }
}

/// NaN or +inf: not a usable logit.
fn is_bad(l: f32) -> bool {
    l.is_nan() | (l == f32::INFINITY)
}

/// The highest logit's id, the lowest id among equals. `data` is not empty.
fn argmax(data: &[TokenProb]) -> u32 {
    data.iter()
        .copied()
        .min_by(chain::by_logit_desc)
        .map_or(0, |t| t.id)
}

/// The candidates sampling with top-k = `k` starts from when nothing changes the logits: the `k`
/// highest (lower id first among equals, -inf left out, -0 as +0) as `(id, logit)`, highest
/// first. `logits` holds no NaN or +inf (the sampler refuses those first).
pub fn top_candidates(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut v = Vec::new();
    chain::top_n(logits, k, &mut v);
    v.into_iter().map(|t| (t.id, t.logit)).collect()
}
