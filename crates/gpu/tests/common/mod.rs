//! Helpers shared by the GPU tests: the skip rule (no adapter: print and return, so CI without
//! a GPU or a Vulkan driver stays green), a seeded generator, quantized random matrices.
#![allow(dead_code, unused_imports)]

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

pub use cpu::conformance::{Rng, matrix};

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
