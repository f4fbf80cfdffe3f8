//! Helpers shared by the GPU tests: a seeded generator, quantized random matrices, error measures
//! and the skip rule (no device: print and return, so CI without a GPU stays green).
#![allow(dead_code, unused_imports)]

/// Returns the device, or prints "skipped: no CUDA device" and returns `None`.
pub fn gpu() -> Option<cuda::Gpu> {
    if !cuda::is_available() {
        println!("skipped: no CUDA device");
        return None;
    }
    Some(cuda::Gpu::new(0).expect("CUDA device opens"))
}

pub use cpu::conformance::{ALL_TYPES, Rng, matrix, rel, widths};

/// A random quantized matrix (`matrix`: its bytes and their dequantized values) of each type and
/// row count, `cols` wide, drawn in order.
pub fn matrices(
    rng: &mut Rng,
    types: &[gguf::GgmlType],
    rows: &[usize],
    cols: usize,
) -> Vec<(Vec<u8>, Vec<f32>)> {
    types
        .iter()
        .zip(rows)
        .map(|(&t, &r)| matrix(rng, t, r, cols))
        .collect()
}

/// The bit patterns of `v`, to compare results that must be identical (NaN included).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A small synthetic model (4096 tokens) of the given width: SmolLM2's heads at 576, else 8 over 2.
pub fn small_spec(
    arch: &'static str,
    ty: gguf::GgmlType,
    n_embd: usize,
    n_ff: usize,
    n_layer: usize,
    seed: u64,
) -> model::synth::SynthSpec {
    model::synth::SynthSpec {
        arch,
        n_vocab: 4096,
        n_embd,
        n_layer,
        n_ff,
        n_head: if n_embd == 576 { 9 } else { 8 },
        n_head_kv: if n_embd == 576 { 3 } else { 2 },
        ty,
        tied: ty != gguf::GgmlType::Q4_K,
        seed,
    }
}

/// `spec` built and uploaded to device 0.
pub fn load(spec: &model::synth::SynthSpec) -> cuda::CudaModel {
    let bytes = model::synth::build(spec).expect("synthetic model builds");
    let m = model::Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap()).unwrap();
    cuda::CudaModel::new(&m, 0).expect("model uploads")
}

/// The index of the largest logit.
pub fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap() as u32
}
