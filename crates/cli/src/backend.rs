//! The one place that chooses a backend: the server crate's `Backend`/`Cache` enums (CPU or a
//! CUDA device) serve the CLI too.

pub use server::backend::{Backend, Cache};
