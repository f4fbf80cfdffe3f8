//! Helpers shared by the GPU tests: a seeded generator, quantized random matrices, error measures
//! and the skip rule (no device: print and return, so CI without a GPU stays green).
#![allow(dead_code)]

use gguf::GgmlType;

/// Returns the device, or prints "skipped: no CUDA device" and returns `None`.
pub fn gpu() -> Option<cuda::Gpu> {
    if !cuda::is_available() {
        println!("skipped: no CUDA device");
        return None;
    }
    Some(cuda::Gpu::new(0).expect("CUDA device opens"))
}

/// xorshift64*, uniform in [-1, 1).
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn f(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (v as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        ((self.f() * 0.5 + 0.5) * n as f32) as usize % n
    }
}

/// A random `rows` x `cols` matrix quantized to `ty`, and its dequantized values.
pub fn matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let vals = rng.vec(rows * cols, 1.0);
    let mut bytes = vec![0u8; ty.bytes_for((rows * cols) as u64).unwrap() as usize];
    quant::quantize(ty, &vals, &mut bytes).unwrap();
    let mut deq = vec![0.0f32; rows * cols];
    quant::dequantize(ty, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

/// ‖a − b‖ / ‖b‖ in f64; NaN anywhere gives infinity.
pub fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        if !x.is_finite() || !y.is_finite() {
            return f64::INFINITY;
        }
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Every type the CPU reference supports.
pub const ALL_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The real widths (SmolLM2, Qwen2.5, ffn) the type can hold: K-quants need multiples of 256.
pub fn widths(ty: GgmlType) -> Vec<usize> {
    [576usize, 896, 1536, 4864]
        .into_iter()
        .filter(|&c| (c as u64).is_multiple_of(ty.block_size()))
        .collect()
}
