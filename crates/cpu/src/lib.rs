//! The CPU backend: scalar reference operations and the forward pass of a llama-family decoder.

mod attention;
mod batch;
mod block;
pub mod conformance;
mod error;
mod forward;
mod kv;
mod matmul;
pub mod ops;
mod paged;
mod pool;

pub use error::{CpuError, Result};
pub use forward::{CpuModel, Logits, check_input};
pub use kv::{CacheType, KvCache};
pub use matmul::{matmul, sgemm_strided};
pub use paged::{BLOCK_POSITIONS, KvPool};
