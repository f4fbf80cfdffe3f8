//! Model architectures: hyper-parameters from GGUF metadata, weights bound by name and
//! shape-checked at load, and the GGUF-to-GGUF quantizer.

pub mod arch;
mod error;
mod hparams;
mod model;
pub mod quantize;
pub mod synth;
mod weights;

pub use arch::FfnAct;
pub use error::{ModelError, Result};
pub use hparams::{HParams, RopeStyle};
pub use model::{Layer, Model};
pub use weights::Matrix;
