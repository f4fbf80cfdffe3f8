//! Token sampling and stop strings.
//!
//! - [`Sampler`]: llama.cpp's default sampler chain (logit bias, repetition/frequency/
//!   presence penalties, top-k, typical-p, top-p, min-p, temperature, seeded draw),
//!   configured by [`SamplerConfig`] with llama.cpp's defaults.
//! - [`StopMatcher`]: finds stop strings in streamed text without emitting any part of
//!   them.
//!
//! ```
//! use sampler::{Sampler, SamplerConfig};
//! let mut s = Sampler::new(SamplerConfig { seed: Some(7), ..SamplerConfig::default() }, 4).unwrap();
//! let token = s.sample(&[0.1, 2.0, -1.0, 0.5], &[]).unwrap();
//! assert!(token < 4);
//! let mut greedy = Sampler::new(SamplerConfig::greedy(), 4).unwrap();
//! assert_eq!(greedy.sample(&[0.1, 2.0, -1.0, 2.0], &[]).unwrap(), 1);
//! ```

mod chain;
mod config;
mod rng;
mod sampler;
mod stop;

pub use chain::TokenProb;
pub use config::{SamplerConfig, SamplerError};
pub use sampler::{Sampler, top_candidates};
pub use stop::{StopMatcher, StopResult};
