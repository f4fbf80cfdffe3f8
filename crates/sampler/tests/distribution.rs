//! Statistical checks: over 20k seeded draws, token frequencies match the softmax of
//! what the chain keeps. The seeds are fixed, so these are deterministic.

use sampler::{Sampler, SamplerConfig};

const DRAWS: usize = 20_000;

fn frequencies(cfg: SamplerConfig, logits: &[f32]) -> Vec<f64> {
    let mut s = Sampler::new(cfg, logits.len()).unwrap();
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..DRAWS {
        counts[s.sample(logits, &[]).unwrap() as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / DRAWS as f64).collect()
}

fn softmax(logits: &[f32], temperature: f64, keep: &[usize]) -> Vec<f64> {
    let w: Vec<f64> = (0..logits.len())
        .map(|i| {
            if keep.contains(&i) {
                (f64::from(logits[i]) / temperature).exp()
            } else {
                0.0
            }
        })
        .collect();
    let z: f64 = w.iter().sum();
    w.iter().map(|x| x / z).collect()
}

/// Each frequency within 4.5 standard errors of its probability, and a chi-square
/// statistic below the 99.9% quantile for the degrees of freedom.
fn assert_matches(freq: &[f64], want: &[f64]) {
    let mut chi2 = 0.0;
    let mut dof = 0usize;
    for (i, (&f, &p)) in freq.iter().zip(want).enumerate() {
        if p == 0.0 {
            assert_eq!(f, 0.0, "token {i} has probability 0 but was drawn");
            continue;
        }
        let se = (p * (1.0 - p) / DRAWS as f64).sqrt();
        assert!(
            (f - p).abs() < 4.5 * se + 1e-12,
            "token {i}: frequency {f:.4}, probability {p:.4}"
        );
        chi2 += (f - p).powi(2) / p * DRAWS as f64;
        dof += 1;
    }
    // 99.9% quantiles of chi-square with 1..=7 degrees of freedom
    let q = [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32];
    assert!(
        chi2 < q[dof.saturating_sub(2).min(6)],
        "chi2 {chi2:.2} with {} dof",
        dof - 1
    );
}

const LOGITS: [f32; 6] = [1.0, 2.0, 0.5, -1.0, 3.0, 0.0];

fn untruncated(temperature: f32, seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(seed),
        ..SamplerConfig::default()
    }
}

#[test]
fn temperature_1_samples_the_softmax() {
    let freq = frequencies(untruncated(1.0, 11), &LOGITS);
    assert_matches(&freq, &softmax(&LOGITS, 1.0, &[0, 1, 2, 3, 4, 5]));
}

#[test]
fn temperature_scales_the_logits() {
    for (t, seed) in [(0.5, 12), (2.0, 13)] {
        let freq = frequencies(untruncated(t, seed), &LOGITS);
        assert_matches(&freq, &softmax(&LOGITS, f64::from(t), &[0, 1, 2, 3, 4, 5]));
    }
}

#[test]
fn truncation_renormalizes_over_the_kept_set() {
    // top-k 3 keeps ids 4, 1, 0
    let freq = frequencies(
        SamplerConfig {
            top_k: 3,
            ..untruncated(1.0, 14)
        },
        &LOGITS,
    );
    assert_matches(&freq, &softmax(&LOGITS, 1.0, &[0, 1, 4]));
    // min-p 0.2 keeps logits >= 3 + ln 0.2 = 1.39: ids 4 and 1
    let freq = frequencies(
        SamplerConfig {
            min_p: 0.2,
            ..untruncated(0.7, 15)
        },
        &LOGITS,
    );
    assert_matches(&freq, &softmax(&LOGITS, 0.7, &[1, 4]));
    // llama.cpp's defaults on these logits: top-k 40, top-p 0.95 and min-p 0.05 keep
    // ids 4, 1, 0, 2 (p = .61, .22, .08, .05: .96 >= .95 cumulated), then temperature 0.8
    let freq = frequencies(
        SamplerConfig {
            seed: Some(16),
            ..SamplerConfig::default()
        },
        &LOGITS,
    );
    assert_matches(&freq, &softmax(&LOGITS, 0.8, &[0, 1, 2, 4]));
}
