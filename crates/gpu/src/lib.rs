//! molla's portable GPU backend: WGSL compute shaders on wgpu, so one code base runs as Metal
//! on macOS, Vulkan on Linux/Windows/Android and DirectX 12 on Windows.
//!
//! Weights stay in their GGUF block layout, uploaded as arrays of u32 words; each block format
//! has one shader file (`shaders/q4_k.wgsl`, ...) that decodes 8 weights at a time, joined with
//! the shared matvec. Activations and accumulation are f32; the KV cache is f32 or f16 (packed
//! two to a u32, so no SHADER_F16 feature is needed). A forward step records every dispatch into
//! one command buffer and reads back only the logits.

mod device;
mod error;
mod forward;
mod kernels;
pub mod ops;
mod shaders;

pub use device::{Gpu, has_hardware_adapter, is_available};
pub use error::{GpuError, Result};
pub use forward::{GpuKvCache, GpuModel};
pub use kernels::{DevMatrix, Heads, rope_table};
pub use shaders::{all_modules, formats, supports};
