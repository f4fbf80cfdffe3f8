//! The one place that chooses a backend: a model loaded for the CPU or a CUDA device, and the
//! KV cache that goes with it.

use crate::cmd::Device;
use anyhow::{Result, bail};
use cpu::{CpuModel, KvCache, Logits};
use model::{HParams, Model};

/// A model ready to run on one backend.
pub enum Backend {
    Cpu(Box<CpuModel>),
    #[cfg(feature = "cuda")]
    Cuda(Box<cuda::CudaModel>),
}

/// A sequence's KV cache, on the backend that made it.
#[allow(clippy::large_enum_variant)] // one per sequence: the size does not matter
pub enum Cache {
    Cpu(KvCache),
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaKvCache),
}

impl Backend {
    /// Loads `model` onto `device`.
    pub fn new(model: Model, device: Device) -> Result<Backend> {
        match device {
            Device::Cpu => Ok(Backend::Cpu(Box::new(CpuModel::new(model)))),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => Ok(Backend::Cuda(Box::new(cuda::CudaModel::new(
                &model, ordinal,
            )?))),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => {
                bail!("this build of molla has no CUDA backend (built without the `cuda` feature)")
            }
        }
    }

    pub fn hparams(&self) -> &HParams {
        match self {
            Backend::Cpu(m) => &m.model.hp,
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => m.hparams(),
        }
    }

    /// "cpu" or the GPU's name.
    pub fn device_name(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".into(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => m.device_name(),
        }
    }

    pub fn new_cache(&self, capacity: usize) -> Result<Cache> {
        Ok(match self {
            Backend::Cpu(m) => Cache::Cpu(m.new_cache(capacity)),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => Cache::Cuda(m.new_cache(capacity)?),
        })
    }

    /// Runs `tokens` after what `cache` holds; logits of the last token or of all of them.
    pub fn forward(&self, tokens: &[u32], cache: &mut Cache, which: Logits) -> Result<Vec<f32>> {
        match (self, cache) {
            (Backend::Cpu(m), Cache::Cpu(c)) => Ok(m.forward(tokens, c, which)?),
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c)) => Ok(m.forward(tokens, c, which)?),
            #[allow(unreachable_patterns)]
            _ => bail!("KV cache belongs to another backend"),
        }
    }
}

impl Cache {
    pub fn clear(&mut self) {
        match self {
            Cache::Cpu(c) => c.clear(),
            #[cfg(feature = "cuda")]
            Cache::Cuda(c) => c.clear(),
        }
    }
}
