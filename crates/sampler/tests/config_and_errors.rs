//! Defaults, seeds, and refusals: bad configs and bad logits are errors, never panics.

mod common;

use common::test_logits;
use sampler::{Sampler, SamplerConfig, SamplerError};

#[test]
fn defaults_are_llama_cpp_defaults() {
    let c = SamplerConfig::default();
    assert_eq!(
        (c.temperature, c.top_k, c.top_p, c.min_p, c.typical_p),
        (0.8, 40, 0.95, 0.05, 1.0)
    );
    assert_eq!(
        (
            c.repeat_penalty,
            c.frequency_penalty,
            c.presence_penalty,
            c.penalty_last_n
        ),
        (1.0, 0.0, 0.0, 64)
    );
    assert!(c.logit_bias.is_empty() && c.seed.is_none());
    assert_eq!(SamplerConfig::greedy().temperature, 0.0);
}

#[test]
fn seeds_reproduce() {
    let logits = test_logits(5, 500);
    let cfg = SamplerConfig {
        top_k: 0,
        min_p: 0.0,
        temperature: 1.5,
        ..SamplerConfig::default()
    };
    let draw = |seed: u64| {
        let mut s = Sampler::new(
            SamplerConfig {
                seed: Some(seed),
                ..cfg.clone()
            },
            500,
        )
        .unwrap();
        (0..200)
            .map(|_| s.sample(&logits, &[]).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(42), draw(42));
    assert_ne!(draw(42), draw(43));
    let mut s = Sampler::new(
        SamplerConfig {
            seed: Some(1),
            ..cfg.clone()
        },
        500,
    )
    .unwrap();
    s.reseed(42);
    assert_eq!(
        (0..200)
            .map(|_| s.sample(&logits, &[]).unwrap())
            .collect::<Vec<_>>(),
        draw(42)
    );
}

#[test]
fn bad_configs_are_refused() {
    let bad = [
        SamplerConfig {
            temperature: f32::NAN,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            top_k: -1,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            top_p: 1.5,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            min_p: -0.1,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            typical_p: f32::NAN,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            repeat_penalty: 0.0,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            frequency_penalty: f32::INFINITY,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            penalty_last_n: -2,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            logit_bias: vec![(10, 1.0)],
            ..SamplerConfig::default()
        },
        SamplerConfig {
            logit_bias: vec![(1, f32::NAN)],
            ..SamplerConfig::default()
        },
    ];
    for cfg in bad {
        let err = Sampler::new(cfg.clone(), 10).unwrap_err();
        assert!(
            matches!(err, SamplerError::InvalidConfig(_)),
            "{cfg:?}: {err}"
        );
    }
    assert!(Sampler::new(SamplerConfig::default(), 0).is_err());
}

#[test]
fn bad_logits_are_errors_not_panics() {
    let mut s = Sampler::new(
        SamplerConfig {
            seed: Some(0),
            ..SamplerConfig::default()
        },
        3,
    )
    .unwrap();
    let err = s.sample(&[0.0, f32::NAN, 1.0], &[]).unwrap_err();
    assert!(
        matches!(err, SamplerError::BadLogit { index: 1, value } if value.is_nan()),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "logit 1 is NaN: logits must be finite or -inf"
    );
    assert!(matches!(
        s.sample(&[0.0, 1.0, f32::INFINITY], &[]),
        Err(SamplerError::BadLogit { index: 2, .. })
    ));
    assert_eq!(
        s.sample(&[0.0, 1.0], &[]),
        Err(SamplerError::LogitsLength {
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        s.sample(&[f32::NEG_INFINITY; 3], &[]),
        Err(SamplerError::NoCandidates)
    );
    let mut g = Sampler::new(SamplerConfig::greedy(), 3).unwrap();
    assert_eq!(
        g.sample(&[f32::NEG_INFINITY; 3], &[]),
        Err(SamplerError::NoCandidates)
    );
    assert!(matches!(
        g.sample(&[f32::NAN, 1.0, 0.0], &[]),
        Err(SamplerError::BadLogit { index: 0, .. })
    ));
    // still usable afterwards
    assert_eq!(
        s.sample(&[f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY], &[1, 1, 1])
            .unwrap(),
        1
    );
}
