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

/// The mixed three-segment matvec both the kernels and the wide suites test (Q4_K, Q6_K and
/// Q8_0 rows over 1536 columns, each with a bias and an accumulator row), drawn in order: the
/// matrices, the input x, the auxiliary row (RMSNorm weights or SwiGLU's up), the biases, the
/// accumulators.
pub struct MixedSegs {
    pub cols: usize,
    pub types: [gguf::GgmlType; 3],
    pub rows: [usize; 3],
    pub mats: Vec<(Vec<u8>, Vec<f32>)>,
    pub x: Vec<f32>,
    pub aux: Vec<f32>,
    pub bias: Vec<Vec<f32>>,
    pub acc: Vec<Vec<f32>>,
}

impl MixedSegs {
    pub fn new(rng: &mut Rng) -> MixedSegs {
        let cols = 1536;
        let types = [
            gguf::GgmlType::Q4_K,
            gguf::GgmlType::Q6_K,
            gguf::GgmlType::Q8_0,
        ];
        let rows = [129usize, 65, 33];
        let mats = matrices(rng, &types, &rows, cols);
        let x = rng.vec(cols, 2.0);
        let aux = rng.vec(cols, 1.0);
        let bias = rows.iter().map(|&r| rng.vec(r, 1.0)).collect();
        let acc = rows.iter().map(|&r| rng.vec(r, 1.0)).collect();
        MixedSegs {
            cols,
            types,
            rows,
            mats,
            x,
            aux,
            bias,
            acc,
        }
    }

    /// The three segments, each with its bias and accumulator row.
    pub fn segs(&self) -> Vec<cuda::testing::Seg<'_>> {
        (0..3)
            .map(|i| cuda::testing::Seg {
                ty: self.types[i],
                rows: self.rows[i],
                w: &self.mats[i].0,
                bias: Some(&self.bias[i]),
                acc: Some(&self.acc[i]),
            })
            .collect()
    }
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
