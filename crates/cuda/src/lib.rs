//! molla's CUDA backend.
//!
//! Kernels are `.cu` files in `kernels/`, embedded in the binary and compiled by NVRTC for the
//! device's architecture on first use (cached on disk, see `compile`). The driver and NVRTC are
//! loaded at run time (cudarc's dynamic loading), so this crate builds without a CUDA toolkit and
//! [`is_available`] answers `false` on machines without one.
//!
//! Weights stay in their GGUF block layout on the device. Decode runs fused matvecs (RMSNorm or
//! SwiGLU folded into the input load, bias and residual add into the output) and is captured once
//! per cache as a CUDA graph; prefill runs tiled matmuls that dequantize weight tiles into shared
//! memory. Activations and accumulation are f32; the KV cache is f16 (or f32). Small models decode
//! as one persistent kernel launch a token (`persistent`), big ones replay the graph.

mod blas;
mod compile;
mod device;
mod error;
mod forward;
mod fused;
mod kv;
mod launch;
mod mapped;
mod pdl;
mod persistent;
pub mod testing;
mod watchdog;
mod weights;

pub use device::{Gpu, is_available};
pub use error::{CudaError, Result};
pub use forward::{CudaModel, PK_MAX_POS, Pick, TOPK_MAX, TopLogits, chain_on, top_k_fits};
pub use kv::CudaKvCache;
pub use launch::att_tile;
pub use persistent::Trace;
pub use weights::supports;
