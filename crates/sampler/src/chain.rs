//! The stages of llama.cpp's sampler chain, on a working set of candidates (llama.cpp's
//! `llama_token_data_array`). Each mirrors the CPU `apply` of the llama.cpp sampler of
//! the same name (src/llama-sampler.cpp) with `min_keep = 0`, except where noted.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::SamplerConfig;
use crate::rng::Rng;

/// A token with its logit and, once a stage has computed it, its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenProb {
    /// Token id.
    pub id: u32,
    /// Logit after the stages so far.
    pub logit: f32,
    /// Probability within the current set (softmax of the logits), when computed.
    pub p: f32,
}

/// The working set; `sorted` means by descending logit (ties: lower id first).
pub(crate) struct Candidates {
    pub data: Vec<TokenProb>,
    pub sorted: bool,
}

/// Descending logit, then ascending id: a total order, so results never depend on the
/// sort algorithm.
pub(crate) fn by_logit_desc(a: &TokenProb, b: &TokenProb) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Counts each token of `window` (the latest history tokens).
pub(crate) fn count_tokens(window: &[u32], counts: &mut HashMap<u32, u32>) {
    counts.clear();
    for &t in window {
        *counts.entry(t).or_insert(0) += 1;
    }
}

/// Repetition, frequency and presence penalties for a token seen `count` times: a
/// positive logit is divided by `repeat_penalty`, a non-positive one multiplied, then
/// `count * frequency_penalty + presence_penalty` is subtracted.
pub(crate) fn penalize(logit: f32, count: u32, cfg: &SamplerConfig) -> f32 {
    let logit = if logit <= 0.0 {
        logit * cfg.repeat_penalty
    } else {
        logit / cfg.repeat_penalty
    };
    logit - (count as f32 * cfg.frequency_penalty + cfg.presence_penalty)
}

/// The `n` best tokens of `logits` (by [`by_logit_desc`], -inf left out) into `out`,
/// sorted, in one pass: each logit is compared with the current n-th best and only a
/// better one is inserted.
pub(crate) fn top_n(logits: &[f32], n: usize, out: &mut Vec<TokenProb>) {
    out.clear();
    let mut threshold = f32::NEG_INFINITY;
    for (i, &logit) in logits.iter().enumerate() {
        // -0 as +0 (the same weight in every stage): then the test below and the insertion's
        // total order agree, and the set is the n best by (logit, lower id first)
        let logit = logit + 0.0;
        // -inf never enters; a later id loses ties, so equal to the n-th best is not better
        if logit <= threshold {
            continue;
        }
        let t = TokenProb {
            id: i as u32,
            logit,
            p: 0.0,
        };
        let pos = out.partition_point(|b| by_logit_desc(b, &t) == Ordering::Less);
        out.insert(pos, t);
        if out.len() > n {
            out.pop();
        }
        if out.len() == n {
            threshold = out[n - 1].logit;
        }
    }
}

/// Sets `p` to the softmax of the logits, sorting first when `sort` is asked.
pub(crate) fn softmax(c: &mut Candidates, sort: bool) {
    if sort && !c.sorted {
        c.data.sort_unstable_by(by_logit_desc);
        c.sorted = true;
    }
    let max = c
        .data
        .iter()
        .map(|t| t.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for t in c.data.iter_mut() {
        t.p = (t.logit - max).exp();
        sum += f64::from(t.p);
    }
    for t in c.data.iter_mut() {
        t.p = (f64::from(t.p) / sum) as f32;
    }
}

/// Keeps the `k` highest logits (k = 0: all), leaving the set sorted.
pub(crate) fn top_k(c: &mut Candidates, k: usize) {
    if k == 0 {
        return;
    }
    let k = k.min(c.data.len());
    if !c.sorted {
        if k < c.data.len() {
            c.data.select_nth_unstable_by(k - 1, by_logit_desc);
            c.data.truncate(k);
        }
        c.data.sort_unstable_by(by_logit_desc);
        c.sorted = true;
    }
    c.data.truncate(k);
}

/// Locally typical sampling: keeps the tokens whose surprise is closest to the
/// entropy until their mass exceeds `p`. Zero-probability tokens count as infinitely
/// atypical (llama.cpp would compute NaN for them).
pub(crate) fn typical(c: &mut Candidates, p: f32) {
    if p >= 1.0 {
        return;
    }
    softmax(c, true);
    let entropy: f32 = c
        .data
        .iter()
        .filter(|t| t.p > 0.0)
        .map(|t| -t.p * t.p.ln())
        .sum();
    let score = |t: &TokenProb| {
        if t.p > 0.0 {
            (-t.p.ln() - entropy).abs()
        } else {
            f32::INFINITY
        }
    };
    let mut order: Vec<usize> = (0..c.data.len()).collect();
    order.sort_by(|&a, &b| score(&c.data[a]).total_cmp(&score(&c.data[b])));
    let mut cum = 0.0f32;
    let mut last = order.len();
    for (i, &idx) in order.iter().enumerate() {
        cum += c.data[idx].p;
        if cum > p {
            last = i + 1;
            break;
        }
    }
    c.data = order[..last].iter().map(|&i| c.data[i]).collect();
    c.sorted = false;
}

/// Nucleus sampling: keeps the most likely tokens until their probability (softmax of
/// the current, untempered logits) reaches `p`. An unsorted set is sorted only as far
/// as needed: the best 256, then 8 times more, ... until they hold `p` (llama.cpp also
/// tries its top 256 first).
pub(crate) fn top_p(c: &mut Candidates, p: f32) {
    if p >= 1.0 {
        return;
    }
    softmax(c, false);
    if !c.sorted {
        let mut k = 256;
        loop {
            if k >= c.data.len() {
                c.data.sort_unstable_by(by_logit_desc);
                break;
            }
            c.data.select_nth_unstable_by(k - 1, by_logit_desc);
            c.data[..k].sort_unstable_by(by_logit_desc);
            if c.data[..k].iter().map(|t| t.p).sum::<f32>() >= p {
                break; // the cut falls inside the sorted head
            }
            k *= 8;
        }
        c.sorted = true;
    }
    let mut cum = 0.0f32;
    let mut last = c.data.len();
    for (i, t) in c.data.iter().enumerate() {
        cum += t.p;
        if cum >= p {
            last = i + 1;
            break;
        }
    }
    c.data.truncate(last);
}

/// Keeps tokens whose probability is at least `p` times the top one's, i.e. whose logit
/// is at least `max + ln(p)`; keeps the order.
pub(crate) fn min_p(c: &mut Candidates, p: f32) {
    if p <= 0.0 || c.data.is_empty() {
        return;
    }
    let max = c
        .data
        .iter()
        .map(|t| t.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let min_logit = max + p.ln();
    c.data.retain(|t| t.logit >= min_logit);
}

/// Divides the logits by `t`; `t <= 0` keeps only the top token (lowest id on ties).
pub(crate) fn temperature(c: &mut Candidates, t: f32) {
    if t <= 0.0 {
        if let Some(best) = c.data.iter().copied().min_by(by_logit_desc) {
            c.data.clear();
            c.data.push(TokenProb { p: 1.0, ..best });
            c.sorted = true;
        }
    } else if t != 1.0 {
        for tok in c.data.iter_mut() {
            tok.logit /= t;
        }
    }
}

/// Draws a token from the softmax of the set (llama.cpp's `dist`), in f64.
pub(crate) fn dist(c: &mut Candidates, rng: &mut Rng) -> u32 {
    softmax(c, false);
    let total: f64 = c.data.iter().map(|t| f64::from(t.p)).sum();
    let u = rng.next_f64() * total;
    let mut cum = 0.0f64;
    for t in &c.data {
        cum += f64::from(t.p);
        if cum > u {
            return t.id;
        }
    }
    c.data
        .iter()
        .rev()
        .find(|t| t.p > 0.0)
        .map_or(c.data[0].id, |t| t.id)
}
