//! Whole-model conformance: wgpu logits vs the CPU backend, on synthetic models of real shapes
//! (every position of a chunked prefill, then decode) and on the real test models (SmolLM2-135M
//! Q4_1, Qwen2.5-Coder-0.5B Q4_K_M mix, Gemma 3 270M Q4_K_M): same top-1, top-16 log-prob difference <= 0.02.
//! Skips with a message when no adapter is found or a model file is missing.

mod common;

use common::{Rng, gpu};
use cpu::{CpuModel, Logits};
use gguf::{GgmlType, GgufFile};
use gpu::GpuModel;
use model::Model;
use model::synth::{SynthSpec, build};
use std::path::PathBuf;

/// Same top-1 and top-16 log-probs within 0.02 of the CPU (`cpu::conformance`).
fn compare(what: &str, got: &[f32], cpu: &[f32]) -> f64 {
    cpu::conformance::compare_logits(what, got, cpu)
}

/// Prefill of `prompt` (every position, or the last), then `steps` greedy decode steps, GPU vs
/// CPU at each position. Returns the largest top-16 log-prob difference.
fn check(tag: &str, cpu: &CpuModel, g: &GpuModel, prompt: &[u32], steps: usize, all: bool) -> f64 {
    let vocab = cpu.model.hp.n_vocab;
    let cap = prompt.len() + steps + 8;
    let (mut kc, mut kg) = (cpu.new_cache(cap), g.new_cache(cap).unwrap());
    let which = if all { Logits::All } else { Logits::Last };
    let c = cpu.forward(prompt, &mut kc, which).unwrap();
    let t0 = std::time::Instant::now();
    let gl = g.forward(prompt, &mut kg, which).unwrap();
    let prefill = t0.elapsed();
    assert_eq!(kg.len, prompt.len());
    let mut worst = 0.0f64;
    for (t, (gr, cr)) in gl.chunks(vocab).zip(c.chunks(vocab)).enumerate() {
        worst = worst.max(compare(&format!("{tag} prefill row {t}"), gr, cr));
    }
    let mut next = prompt[prompt.len() - 1];
    let t0 = std::time::Instant::now();
    for s in 0..steps {
        let c = cpu.forward(&[next], &mut kc, Logits::Last).unwrap();
        let gl = g.forward(&[next], &mut kg, Logits::Last).unwrap();
        worst = worst.max(compare(&format!("{tag} decode step {s}"), &gl, &c));
        next = (0..vocab).max_by(|&a, &b| c[a].total_cmp(&c[b])).unwrap() as u32;
    }
    println!(
        "{tag}: {} prefill ({} ms) + {steps} decode positions ({} ms each, with the CPU's), max |dlogprob| top-16 {worst:.2e}",
        prompt.len(),
        prefill.as_millis(),
        t0.elapsed().as_millis() / steps.max(1) as u128,
    );
    worst
}

fn synth(spec: &SynthSpec) -> (CpuModel, Model) {
    let bytes = build(spec).expect("synthetic model builds");
    let cpu =
        CpuModel::new(Model::from_file(GgufFile::from_bytes(bytes.clone()).unwrap()).unwrap());
    (
        cpu,
        Model::from_file(GgufFile::from_bytes(bytes).unwrap()).unwrap(),
    )
}

fn synth_case(spec: SynthSpec, prompt_len: usize, f16: bool) {
    let Some(g) = gpu() else { return };
    let (cpu, m) = synth(&spec);
    let mut gm = GpuModel::with_gpu(g, &m).expect("model uploads");
    gm.set_cache_f16(f16);
    let mut rng = Rng::new(spec.seed);
    let prompt: Vec<u32> = (0..prompt_len)
        .map(|_| rng.below(spec.n_vocab) as u32)
        .collect();
    let tag = format!("synthetic {} {} f16-cache {f16}", spec.arch, spec.ty);
    check(&tag, &cpu, &gm, &prompt, 3, true);
}

#[test]
fn synthetic_smollm2_shape_q4_1_with_chunked_prefill() {
    // 70 tokens: two prefill chunks (64 + 6).
    let spec = SynthSpec {
        arch: "llama",
        n_vocab: 4096,
        n_embd: 576,
        n_layer: 2,
        n_ff: 1536,
        n_head: 9,
        n_head_kv: 3,
        ty: GgmlType::Q4_1,
        tied: true,
        seed: 11,
    };
    synth_case(spec, 70, false);
}

#[test]
fn synthetic_qwen_shape_q8_0_biases_neox_f16_cache() {
    let spec = SynthSpec {
        arch: "qwen2",
        n_vocab: 4096,
        n_embd: 896,
        n_layer: 2,
        n_ff: 4864,
        n_head: 14,
        n_head_kv: 2,
        ty: GgmlType::Q8_0,
        tied: false,
        seed: 13,
    };
    synth_case(spec, 9, true);
}

/// gemma3 (q/k norms, post-norms, GeGLU, scaled embeddings): Gemma 3 270M's width, heads and
/// FFN over six layers, five of them over the synthetic 4-position window, the sixth global;
/// 70 tokens (two prefill chunks, the window crossed many times) and three decode steps.
#[test]
fn synthetic_gemma3_shape_sliding_window() {
    for (ty, f16) in [(GgmlType::Q8_0, false), (GgmlType::Q5_0, true)] {
        let spec = SynthSpec {
            arch: "gemma3",
            n_vocab: 4096,
            n_embd: 640,
            n_layer: 6,
            n_ff: 2048,
            n_head: 4,
            n_head_kv: 1,
            ty,
            tied: true,
            seed: 17,
        };
        synth_case(spec, 70, f16);
    }
}

/// qwen3 (per-head q/k norms, NeoX rope, no biases) with Qwen3's heads of 128 (the synthetic
/// model's q is as wide as the model; scripts/arch_check.py checks wider heads on the CPU).
#[test]
fn synthetic_qwen3_shape_qk_norms() {
    let spec = SynthSpec {
        arch: "qwen3",
        n_vocab: 4096,
        n_embd: 512,
        n_layer: 2,
        n_ff: 1536,
        n_head: 4,
        n_head_kv: 2,
        ty: GgmlType::Q8_0,
        tied: true,
        seed: 19,
    };
    synth_case(spec, 12, false);
}

/// phi3: q/k/v and gate/up read as row ranges of fused tensors.
#[test]
fn synthetic_phi3_fused_tensors() {
    let spec = SynthSpec {
        arch: "phi3",
        n_vocab: 2048,
        n_embd: 384,
        n_ff: 1024,
        n_head: 4,
        n_head_kv: 4,
        ..SynthSpec::tiny("phi3")
    };
    synth_case(spec, 10, false);
}

/// granite: embedding, attention, residual and logit scales (2, 0.1, 0.5, 3).
#[test]
fn synthetic_granite_scales() {
    let spec = SynthSpec {
        arch: "granite",
        n_layer: 3,
        ..SynthSpec::tiny("granite")
    };
    synth_case(spec, 10, true);
}

/// smollm3: a llama block whose fourth layer applies no rope.
#[test]
fn synthetic_smollm3_nope_layer() {
    let spec = SynthSpec {
        arch: "smollm3",
        n_layer: 4,
        ..SynthSpec::tiny("smollm3")
    };
    synth_case(spec, 10, false);
}

/// gemma2 (post-norms, GeGLU, soft-capped scores and logits) over four layers, windows of 4
/// positions on the even ones, with the default caps (50 and 30); scripts/arch_check.py checks
/// caps small enough to change every score.
#[test]
fn synthetic_gemma2_softcaps() {
    let spec = SynthSpec {
        arch: "gemma2",
        n_vocab: 4096,
        n_embd: 576,
        n_layer: 4,
        n_ff: 1536,
        n_head: 8,
        n_head_kv: 4,
        ty: GgmlType::Q8_0,
        tied: true,
        seed: 23,
    };
    synth_case(spec, 20, true);
}

#[test]
fn synthetic_k_quants() {
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K] {
        let spec = SynthSpec {
            arch: "llama",
            n_vocab: 2048,
            n_embd: 512,
            n_layer: 2,
            n_ff: 1536,
            n_head: 8,
            n_head_kv: 2,
            ty,
            tied: false,
            seed: 12,
        };
        synth_case(spec, 6, false);
    }
}

#[test]
fn bad_input_is_an_error() {
    let Some(g) = gpu() else { return };
    let (_, m) = synth(&SynthSpec::tiny("llama"));
    let gm = GpuModel::with_gpu(g, &m).unwrap();
    let mut kv = gm.new_cache(4).unwrap();
    assert!(gm.forward(&[], &mut kv, Logits::Last).is_err());
    assert!(gm.forward(&[100_000], &mut kv, Logits::Last).is_err());
    assert!(gm.forward(&[1, 2, 3, 4, 5], &mut kv, Logits::Last).is_err());
    assert_eq!(kv.len, 0);
    assert!(gm.new_cache(0).is_err());
}

/// `$MOLLA_MODELS/NAME` or `~/.cache/molla/models/NAME`, if it exists.
fn model_file(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("MOLLA_MODELS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/molla/models"))
        })?;
    let p = dir.join(name);
    if p.exists() {
        Some(p)
    } else {
        println!(
            "skipped: {} not found (scripts/fetch-models fetches it)",
            p.display()
        );
        None
    }
}

fn real_model(file: &str, prompt: &[u32]) {
    let Some(path) = model_file(file) else { return };
    let Some(g) = gpu() else { return };
    let cpu = CpuModel::new(Model::open(&path).unwrap());
    let m = Model::open(&path).unwrap();
    let mut gm = GpuModel::with_gpu(g, &m).expect("model uploads");
    check(file, &cpu, &gm, prompt, 4, false);
    gm.set_cache_f16(true);
    let cpu16 = {
        let mut c = CpuModel::new(Model::open(&path).unwrap());
        c.set_cache_type(cpu::CacheType::F16);
        c
    };
    check(
        &format!("{file} f16 cache"),
        &cpu16,
        &gm,
        &prompt[..5],
        2,
        true,
    );
}

#[test]
fn smollm2_q4_1_matches_the_cpu() {
    // "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    let prompt = [
        1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
    ];
    real_model("SmolLM2-135M-Instruct.Q4_1.gguf", &prompt);
}

#[test]
fn qwen2_5_coder_0_5b_matches_the_cpu() {
    let prompt = [
        151644, 872, 198, 7985, 264, 10135, 729, 429, 12341, 264, 1140, 13, 151645, 198, 151644,
        77091, 198,
    ];
    real_model("qwen2.5-coder-0.5b-instruct.gguf", &prompt);
}

#[test]
fn gemma3_270m_matches_the_cpu() {
    // "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
    let prompt = [
        2, 105, 2364, 107, 3689, 563, 506, 5279, 529, 7001, 236881, 106, 107, 105, 4368, 107,
    ];
    real_model("gemma-3-270m-q4_k_m.gguf", &prompt);
}
