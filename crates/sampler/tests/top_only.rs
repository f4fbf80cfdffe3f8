//! Sampling from the row's top-k candidates alone (`Sampler::sample_top`, what a backend that
//! finds them on the device gives) draws what sampling from the full row draws.

mod common;

use common::test_logits;
use sampler::{Sampler, SamplerConfig, top_candidates};

#[test]
fn sample_top_draws_what_sample_draws() {
    let configs = [
        SamplerConfig::default(),
        SamplerConfig {
            temperature: 1.5,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            top_k: 64,
            typical_p: 0.9,
            ..SamplerConfig::default()
        },
        // Not greedy (typical-p), yet temperature 0: argmax after the truncation.
        SamplerConfig {
            temperature: 0.0,
            top_k: 10,
            typical_p: 0.5,
            ..SamplerConfig::default()
        },
    ];
    for (ci, cfg) in configs.into_iter().enumerate() {
        let cfg = SamplerConfig {
            seed: Some(7 + ci as u64),
            ..cfg
        };
        let n = 3000;
        let (mut a, mut b) = (
            Sampler::new(cfg.clone(), n).unwrap(),
            Sampler::new(cfg.clone(), n).unwrap(),
        );
        let k = b.top_k_only().expect("top-k alone decides");
        assert_eq!(k, cfg.top_k as usize);
        for step in 0..300u64 {
            let mut l = test_logits(step, n);
            // Ties at the top and around the k-th, zeros of both signs, masked tokens.
            l[17] = l[3];
            l[2999] = l[3];
            l[40] = 0.0;
            l[41] = -0.0;
            l[5] = f32::NEG_INFINITY;
            let mut top = top_candidates(&l, k);
            top.reverse();
            let want = a.sample(&l, &[]).unwrap();
            assert_eq!(b.sample_top(&top).unwrap(), want, "config {ci} step {step}");
        }
    }
}

#[test]
fn top_k_only_needs_top_k_and_nothing_changing_logits() {
    let with = |f: fn(&mut SamplerConfig)| {
        let mut c = SamplerConfig::default();
        f(&mut c);
        Sampler::new(c, 100).unwrap().top_k_only()
    };
    assert_eq!(with(|_| ()), Some(40));
    assert_eq!(with(|c| c.temperature = 0.0), None, "greedy");
    assert_eq!(with(|c| c.top_k = 0), None, "top-k off");
    assert_eq!(with(|c| c.logit_bias = vec![(3, 1.0)]), None, "bias");
    assert_eq!(with(|c| c.repeat_penalty = 1.1), None, "penalty");
    let mut s = Sampler::new(SamplerConfig::greedy(), 4).unwrap();
    assert!(s.sample_top(&[(0, 1.0)]).is_err());
}
