//! Forward-pass consistency on small synthetic models: prefill vs token-by-token decode,
//! all-positions vs last-position logits, and errors on bad input.

use cpu::{CpuError, CpuModel, Logits};
use gguf::{GgmlType, GgufFile};
use model::Model;
use model::synth::{SynthSpec, build};

fn load(spec: &SynthSpec) -> CpuModel {
    let bytes = build(spec).expect("synthetic model builds");
    CpuModel::new(Model::from_file(GgufFile::from_bytes(bytes).expect("parses")).expect("binds"))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn prefill_equals_decode_for_each_arch_and_type() {
    for arch in [
        "llama", "qwen2", "qwen3", "smollm3", "phi3", "granite", "gemma2", "gemma3",
    ] {
        // Q5_0..Q6_K: the q16 integer GEMM's tile variants (K-quants need 256-wide rows).
        for ty in [
            GgmlType::F32,
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            let mut spec = SynthSpec::tiny(arch);
            if ty.block_size() == 256 {
                (spec.n_embd, spec.n_ff) = (256, 512);
            }
            spec.ty = ty;
            spec.tied = ty == GgmlType::Q4_1;
            prefill_equals_decode(&load(&spec), &format!("{arch} {ty}"));
        }
    }
}

/// Seven tokens' prefill (every position's logits) against the same tokens decoded one at a
/// time, and against a prefill asking for the last position only.
fn prefill_equals_decode(m: &CpuModel, tag: &str) {
    let tokens = [1u32, 17, 200, 3, 99, 42, 7];
    let mut kv = m.new_cache(16);
    let all = m.forward(&tokens, &mut kv, Logits::All).unwrap();
    assert_eq!(kv.len, tokens.len());
    let v = m.model.hp.n_vocab;
    let mut kv2 = m.new_cache(16);
    for (i, &t) in tokens.iter().enumerate() {
        let step = m.forward(&[t], &mut kv2, Logits::Last).unwrap();
        let d = max_diff(&step, &all[i * v..(i + 1) * v]);
        assert!(
            d < 1e-3,
            "{tag} position {i}: prefill and decode differ by {d}"
        );
    }
    let mut kv3 = m.new_cache(16);
    let last = m.forward(&tokens, &mut kv3, Logits::Last).unwrap();
    assert_eq!(last.len(), v);
    assert!(max_diff(&last, &all[(tokens.len() - 1) * v..]) < 1e-4);
}

/// Heads wider than n_embd / n_head (Gemma 3 270M's four heads of 256 over a 640-wide stream,
/// q 1024 wide): prefill equals decode, as for every other shape.
#[test]
fn heads_wider_than_the_embedding_split() {
    for arch in ["gemma3", "qwen3", "llama"] {
        let spec = SynthSpec::wide_heads(arch);
        let bytes = model::synth::build_with_heads(&spec, model::synth::WIDE_HEAD_DIM).unwrap();
        let m = CpuModel::new(Model::from_file(GgufFile::from_bytes(bytes).unwrap()).unwrap());
        prefill_equals_decode(&m, arch);
    }
}

/// A gemma3 of two sliding-window layers sees the last 1 + 2 (window - 1) tokens only: prompts
/// that differ further back give the same bits, on the prefill and decode paths; with a
/// sixth, global layer they do not.
#[test]
fn sliding_window_layers_forget_what_lies_behind_the_window() {
    let reach = 1 + 2 * (model::synth::SYNTH_WINDOW as usize - 1);
    let a: Vec<u32> = (0..20).map(|i| (i * 37 + 5) % 256).collect();
    let mut b = a.clone();
    for t in &mut b[..20 - reach] {
        *t = (*t + 101) % 256;
    }
    let mut near = a.clone();
    near[20 - reach] = (near[20 - reach] + 101) % 256;
    for n_layer in [2, 6] {
        let m = load(&SynthSpec {
            n_layer,
            ..SynthSpec::tiny("gemma3")
        });
        let run = |toks: &[u32], decode: bool| {
            let mut kv = m.new_cache(32);
            if decode {
                toks.iter()
                    .map(|&t| m.forward(&[t], &mut kv, Logits::Last).unwrap())
                    .last()
                    .unwrap()
            } else {
                m.forward(toks, &mut kv, Logits::Last).unwrap()
            }
        };
        for decode in [false, true] {
            let (la, lb) = (run(&a, decode), run(&b, decode));
            if n_layer == 2 {
                assert_eq!(
                    la, lb,
                    "decode {decode}: tokens behind the window changed the logits"
                );
                // The first token inside the reach does change them.
                assert!(max_diff(&la, &run(&near, decode)) > 1e-4);
            } else {
                assert!(
                    max_diff(&la, &lb) > 1e-4,
                    "decode {decode}: a global layer sees all"
                );
            }
        }
    }
}

#[test]
fn prefill_in_chunks_matches_one_prefill() {
    let m = load(&SynthSpec::tiny("llama"));
    let tokens = [5u32, 6, 7, 8, 9, 10];
    let mut kv = m.new_cache(8);
    let whole = m.forward(&tokens, &mut kv, Logits::Last).unwrap();
    let mut kv2 = m.new_cache(8);
    m.forward(&tokens[..4], &mut kv2, Logits::Last).unwrap();
    let split = m.forward(&tokens[4..], &mut kv2, Logits::Last).unwrap();
    assert!(max_diff(&whole, &split) < 1e-3);
}

#[test]
fn bad_input_is_an_error() {
    let m = load(&SynthSpec::tiny("llama"));
    let mut kv = m.new_cache(4);
    assert!(matches!(
        m.forward(&[], &mut kv, Logits::Last),
        Err(CpuError::NoTokens)
    ));
    assert!(matches!(
        m.forward(&[256], &mut kv, Logits::Last),
        Err(CpuError::BadToken { .. })
    ));
    assert!(matches!(
        m.forward(&[1; 5], &mut kv, Logits::Last),
        Err(CpuError::ContextFull { .. })
    ));
    let other = load(&SynthSpec {
        n_layer: 3,
        ..SynthSpec::tiny("llama")
    });
    let mut wrong = other.new_cache(4);
    assert!(matches!(
        m.forward(&[1], &mut wrong, Logits::Last),
        Err(CpuError::CacheShape)
    ));
}

#[test]
fn f16_cache_stays_close_to_f32() {
    for arch in ["llama", "qwen2"] {
        let mut m = load(&SynthSpec::tiny(arch));
        let tokens = [3u32, 14, 15, 92, 65, 35, 89, 79, 32, 38];
        let mut kv = m.new_cache(16);
        let exact = m.forward(&tokens, &mut kv, Logits::All).unwrap();
        m.set_cache_type(cpu::CacheType::F16);
        let mut kv16 = m.new_cache(16);
        let half = m.forward(&tokens, &mut kv16, Logits::All).unwrap();
        let d = max_diff(&exact, &half);
        assert!(
            d > 0.0 && d < 2e-2,
            "{arch}: prefill with an f16 cache differs by {d}"
        );
        let mut kv16 = m.new_cache(16);
        let v = m.model.hp.n_vocab;
        for (i, &t) in tokens.iter().enumerate() {
            let step = m.forward(&[t], &mut kv16, Logits::Last).unwrap();
            let d = max_diff(&step, &exact[i * v..(i + 1) * v]);
            assert!(
                d < 2e-2,
                "{arch} position {i}: decode with an f16 cache differs by {d}"
            );
        }
    }
}
