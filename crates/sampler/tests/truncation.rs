//! Which tokens greedy, top-k, top-p, min-p and typical-p keep.

mod common;

use common::{PROBS, kept, logits_for, plain, test_logits};
use sampler::{Sampler, SamplerConfig};

#[test]
fn greedy_is_exact_argmax_with_ties_to_lowest_id() {
    let mut g = Sampler::new(SamplerConfig::greedy(), 4).unwrap();
    assert_eq!(g.sample(&[1.0, 3.0, 3.0, 2.0], &[]).unwrap(), 1);
    assert_eq!(
        g.sample(&[f32::NEG_INFINITY, -5.0, -5.0, -7.0], &[])
            .unwrap(),
        1
    );
    let mut neg = Sampler::new(
        SamplerConfig {
            temperature: -1.0,
            ..SamplerConfig::default()
        },
        4,
    )
    .unwrap();
    assert_eq!(neg.sample(&[0.0, 0.0, 0.5, 0.5], &[]).unwrap(), 2);
    let mut g = Sampler::new(SamplerConfig::greedy(), 1000).unwrap();
    for seed in 0..50 {
        let logits = test_logits(seed, 1000);
        let best = (0..1000)
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        assert_eq!(g.sample(&logits, &[]).unwrap(), best);
    }
}

#[test]
fn top_k_1_is_greedy() {
    let mut k1 = Sampler::new(
        SamplerConfig {
            top_k: 1,
            seed: Some(3),
            ..SamplerConfig::default()
        },
        3000,
    )
    .unwrap();
    let mut g = Sampler::new(SamplerConfig::greedy(), 3000).unwrap();
    for seed in 0..50 {
        let mut logits = test_logits(seed, 3000);
        logits[seed as usize * 7] = logits[seed as usize * 11]; // a tie somewhere
        assert_eq!(
            k1.sample(&logits, &[]).unwrap(),
            g.sample(&logits, &[]).unwrap()
        );
    }
}

#[test]
fn top_k_keeps_the_k_best() {
    let logits = [0.3, 2.0, -1.0, 5.0, 2.0, 0.0];
    assert_eq!(
        kept(
            SamplerConfig {
                top_k: 3,
                ..plain()
            },
            &logits,
            &[]
        ),
        [1, 3, 4]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                top_k: 100,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn top_p_keeps_the_nucleus_of_untempered_probabilities() {
    let logits = logits_for(&PROBS);
    assert_eq!(
        kept(
            SamplerConfig {
                top_p: 0.75,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                top_p: 0.81,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                top_p: 0.0,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0]
    );
    // temperature comes after top-p, so it does not change the nucleus
    assert_eq!(
        kept(
            SamplerConfig {
                top_p: 0.75,
                temperature: 3.0,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1]
    );
    // large vocabulary: the partial-sort path must agree with a full sort
    let big = test_logits(9, 50_000);
    let mut sorted = big.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let got = kept(
        SamplerConfig {
            top_p: 0.9,
            ..plain()
        },
        &big,
        &[],
    );
    let cut = sorted[got.len() - 1];
    assert!(got.iter().all(|&id| big[id as usize] >= cut) && got.len() > 1);
}

#[test]
fn min_p_drops_tokens_below_p_times_the_best() {
    let logits = logits_for(&PROBS);
    assert_eq!(
        kept(
            SamplerConfig {
                min_p: 0.15,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2]
    ); // >= 0.075
    assert_eq!(
        kept(
            SamplerConfig {
                min_p: 0.7,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0]
    ); // >= 0.35
    assert_eq!(
        kept(
            SamplerConfig {
                min_p: 0.05,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2, 3, 4]
    );
}

#[test]
fn typical_p_keeps_the_typical_set() {
    // surprise closest to the entropy (1.236 nats): id 1, then 0, 2, 3, 4
    let logits = logits_for(&PROBS);
    assert_eq!(
        kept(
            SamplerConfig {
                typical_p: 0.2,
                ..plain()
            },
            &logits,
            &[]
        ),
        [1]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                typical_p: 0.5,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                typical_p: 0.85,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2]
    );
    assert_eq!(
        kept(
            SamplerConfig {
                typical_p: 0.95,
                ..plain()
            },
            &logits,
            &[]
        ),
        [0, 1, 2, 3]
    );
    // with temperature 0, the argmax of what typical-p keeps (llama.cpp's order)
    let mut s = Sampler::new(
        SamplerConfig {
            typical_p: 0.2,
            temperature: 0.0,
            ..plain()
        },
        5,
    )
    .unwrap();
    assert_eq!(s.sample(&logits, &[]).unwrap(), 1);
}

#[test]
fn candidates_carry_tempered_probabilities() {
    let logits = [1.0f32, 2.0, 0.5, -1.0];
    let mut s = Sampler::new(
        SamplerConfig {
            temperature: 0.5,
            ..plain()
        },
        4,
    )
    .unwrap();
    let c = s.candidates(&logits, &[]).unwrap();
    let z: f32 = logits.iter().map(|l| (l / 0.5).exp()).sum();
    assert_eq!(c.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 0, 2, 3]);
    for t in &c {
        assert!((t.p - (logits[t.id as usize] / 0.5).exp() / z).abs() < 1e-6);
    }
}

/// A backend may pick on its own exactly when sampling is the highest raw logit: greedy, with no
/// logit bias and no penalties that apply.
#[test]
fn plain_greedy_is_greedy_without_bias_or_penalties() {
    let plain_greedy = |cfg: SamplerConfig| Sampler::new(cfg, 8).unwrap().is_plain_greedy();
    assert!(plain_greedy(SamplerConfig::greedy()));
    let g = SamplerConfig::greedy;
    assert!(!plain_greedy(SamplerConfig {
        logit_bias: vec![(3, 1.0)],
        ..g()
    }));
    assert!(!plain_greedy(SamplerConfig {
        repeat_penalty: 1.1,
        ..g()
    }));
    assert!(!plain_greedy(SamplerConfig {
        presence_penalty: 0.5,
        ..g()
    }));
    // Penalties over no history change nothing.
    assert!(plain_greedy(SamplerConfig {
        repeat_penalty: 1.1,
        penalty_last_n: 0,
        ..g()
    }));
    assert!(!plain_greedy(SamplerConfig {
        temperature: 0.7,
        ..g()
    }));
}
