//! Helpers shared by the sampler's integration tests.
#![allow(dead_code)]

use sampler::{Sampler, SamplerConfig};

/// Temperature 1 and every truncation off: the draw sees the plain softmax.
pub fn plain() -> SamplerConfig {
    SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(1),
        ..SamplerConfig::default()
    }
}

/// Logits whose softmax is exactly these probabilities.
pub fn logits_for(probs: &[f32]) -> Vec<f32> {
    probs.iter().map(|p| p.ln()).collect()
}

pub const PROBS: [f32; 5] = [0.5, 0.3, 0.1, 0.06, 0.04];

pub fn kept(cfg: SamplerConfig, logits: &[f32], history: &[u32]) -> Vec<u32> {
    let mut s = Sampler::new(cfg, logits.len()).unwrap();
    let mut ids: Vec<u32> = s
        .candidates(logits, history)
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    ids
}

/// A small deterministic generator of test logits.
pub fn test_logits(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 20.0 - 10.0
        })
        .collect()
}
