//! Test data and checks shared by the integration tests (`mod common;`), the unit tests in
//! `src/tests.rs` and the benches (both through `#[path]`): a deterministic generator, random blocks
//! with finite f16 scales, and the f64 reference dot with its error scale.

// Each test crate uses a different part of this module.
#![allow(dead_code)]

use gguf::GgmlType;

/// SplitMix64: a tiny deterministic generator, enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly normal (sum of uniforms), mean 0, deviation about 1.
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 0.866
    }

    /// `n` values of [`Rng::uniform`].
    pub fn uniforms(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }

    /// `n` values of [`Rng::normal`].
    pub fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// The block formats (every type with a q16 kernel), smallest blocks first.
pub const BLOCK_TYPES: &[GgmlType] = &[
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

/// Byte offsets of the f16 scale fields in one block of `ty` (empty for float types).
pub fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// `n_bytes` random bytes (whole blocks of `ty`) whose f16 fields at `fields` are then set, block by
/// block, to `uniform * magnitude`, with `magnitude(rng)` drawn once per block.
pub fn random_blocks_at(
    rng: &mut Rng,
    ty: GgmlType,
    fields: &[usize],
    n_bytes: usize,
    mut magnitude: impl FnMut(&mut Rng) -> f32,
) -> Vec<u8> {
    let mut v: Vec<u8> = (0..n_bytes).map(|_| rng.next_u64() as u8).collect();
    for blk in v.chunks_exact_mut(ty.type_size() as usize) {
        let mag = magnitude(rng);
        for &at in fields {
            let h = half::f16::from_f32(rng.uniform() * mag).to_le_bytes();
            blk[at..at + 2].copy_from_slice(&h);
        }
    }
    v
}

/// [`random_blocks_at`] with the f16 scale fields of `ty` ([`f16_fields`]).
pub fn random_blocks(
    rng: &mut Rng,
    ty: GgmlType,
    n_bytes: usize,
    magnitude: impl FnMut(&mut Rng) -> f32,
) -> Vec<u8> {
    random_blocks_at(rng, ty, f16_fields(ty), n_bytes, magnitude)
}

/// The f64 dot product of `w` and `x` and its error scale `Σ |w·x|`.
pub fn dot_f64(w: &[f32], x: &[f32]) -> (f64, f64) {
    let exact: f64 = w.iter().zip(x).map(|(&w, &x)| w as f64 * x as f64).sum();
    let scale: f64 = w
        .iter()
        .zip(x)
        .map(|(&w, &x)| (w as f64 * x as f64).abs())
        .sum();
    (exact, scale)
}
