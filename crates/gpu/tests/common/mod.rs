//! Helpers shared by the GPU tests: the skip rule (no adapter: print and return, so CI without
//! a GPU or a Vulkan driver stays green), a seeded generator, quantized random matrices.
#![allow(dead_code)]

use gguf::GgmlType;

/// Opens the adapter, or prints why not and returns `None`. With `MOLLA_REQUIRE_GPU=1` (set by
/// .ci/run once it has a Vulkan driver) a missing adapter fails the test instead of skipping it.
pub fn gpu() -> Option<gpu::Gpu> {
    match gpu::Gpu::new() {
        Ok(g) => {
            eprintln!("gpu: {}", g.name());
            Some(g)
        }
        Err(e) => {
            assert!(
                std::env::var("MOLLA_REQUIRE_GPU").as_deref() != Ok("1"),
                "MOLLA_REQUIRE_GPU=1 but no adapter: {e}"
            );
            println!("skipped: {e}");
            None
        }
    }
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

/// A random `rows` x `cols` matrix quantized to `ty`: its bytes and dequantized values.
pub fn matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let vals = rng.vec(rows * cols, 1.0);
    let mut bytes = vec![0u8; ty.bytes_for((rows * cols) as u64).unwrap() as usize];
    quant::quantize(ty, &vals, &mut bytes).unwrap();
    let mut deq = vec![0.0f32; rows * cols];
    quant::dequantize(ty, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

/// Largest |a - b|.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                f32::INFINITY
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f32::max)
}

/// Largest |a - b| / (1 + |b|).
pub fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                f32::INFINITY
            } else {
                (x - y).abs() / (1.0 + y.abs())
            }
        })
        .fold(0.0, f32::max)
}
