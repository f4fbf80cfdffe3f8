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
