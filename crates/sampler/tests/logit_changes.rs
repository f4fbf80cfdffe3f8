//! Penalties and logit bias change exactly the logits llama.cpp's samplers change.

mod common;

use common::plain;
use sampler::{Sampler, SamplerConfig};

#[test]
fn penalties_change_exactly_the_penalised_ids() {
    let logits = [2.0f32, -2.0, 1.0, 0.0, 3.0];
    let history = [0, 1, 1, 3, 0, 0, 77]; // counts: 0 -> 3, 1 -> 2, 3 -> 1; 77 is not a token
    let cfg = SamplerConfig {
        repeat_penalty: 2.0,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        penalty_last_n: -1,
        ..plain()
    };
    let after = |cfg: SamplerConfig, history: &[u32]| {
        let mut s = Sampler::new(cfg, 5).unwrap();
        let mut out = [f32::NAN; 5];
        for t in s.candidates(&logits, history).unwrap() {
            out[t.id as usize] = t.logit;
        }
        out
    };
    // positive logits divided, non-positive multiplied, then count*freq + presence off
    assert_eq!(
        after(cfg.clone(), &history),
        [2.0 / 2.0 - 1.75, -2.0 * 2.0 - 1.25, 1.0, 0.0 - 0.75, 3.0]
    );
    // only the last 2 tokens (0, 77) count
    assert_eq!(
        after(
            SamplerConfig {
                penalty_last_n: 2,
                ..cfg.clone()
            },
            &history
        ),
        [1.0 - 0.75, -2.0, 1.0, 0.0, 3.0]
    );
    assert_eq!(
        after(
            SamplerConfig {
                penalty_last_n: 0,
                ..cfg.clone()
            },
            &history
        ),
        logits
    );
    // repeat penalty alone
    let rep = SamplerConfig {
        repeat_penalty: 1.25,
        penalty_last_n: 64,
        ..plain()
    };
    assert_eq!(after(rep, &history), [1.6, -2.5, 1.0, 0.0, 3.0]);
}

#[test]
fn logit_bias_applies_before_everything() {
    let logits = [1.0f32, 2.0, 0.5, 3.0];
    let cfg = SamplerConfig {
        logit_bias: vec![(3, f32::NEG_INFINITY), (2, 10.0), (2, 1.0)],
        ..SamplerConfig::greedy()
    };
    let mut g = Sampler::new(cfg.clone(), 4).unwrap();
    assert_eq!(g.sample(&logits, &[]).unwrap(), 2);
    let mut s = Sampler::new(
        SamplerConfig {
            temperature: 1.0,
            ..cfg
        },
        4,
    )
    .unwrap();
    let c = s.candidates(&logits, &[]).unwrap();
    assert!(c.iter().all(|t| t.id != 3));
    assert_eq!(c[0].id, 2);
    assert_eq!(c[0].logit, 11.5);
}
