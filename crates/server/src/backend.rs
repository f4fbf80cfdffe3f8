//! A model loaded for the CPU or a CUDA device, and the KV cache that goes with it (mirrors
//! `molla`'s own `backend.rs`, with typed errors).

use crate::error::ServerError;
use cpu::{CpuModel, KvCache, Logits};
use model::{HParams, Model};

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(usize),
}

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
    pub fn new(model: Model, device: Device) -> Result<Backend, ServerError> {
        match device {
            Device::Cpu => Ok(Backend::Cpu(Box::new(CpuModel::new(model)))),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => Ok(Backend::Cuda(Box::new(cuda::CudaModel::new(
                &model, ordinal,
            )?))),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(ServerError::NoCuda),
        }
    }

    /// The KV cache element type for caches made from now on; the CPU honours it, CUDA caches
    /// are always f16.
    pub fn set_cache_type(&mut self, ty: cpu::CacheType) {
        if let Backend::Cpu(m) = self {
            m.set_cache_type(ty);
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

    pub fn new_cache(&self, capacity: usize) -> Result<Cache, ServerError> {
        Ok(match self {
            Backend::Cpu(m) => Cache::Cpu(m.new_cache(capacity)),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => Cache::Cuda(m.new_cache(capacity)?),
        })
    }

    /// Runs `tokens` after what `cache` holds; logits of the last token or of all of them.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
        which: Logits,
    ) -> Result<Vec<f32>, ServerError> {
        match (self, cache) {
            (Backend::Cpu(m), Cache::Cpu(c)) => Ok(m.forward(tokens, c, which)?),
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c)) => Ok(m.forward(tokens, c, which)?),
            #[allow(unreachable_patterns)]
            _ => Err(ServerError::CacheMismatch),
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

    /// How many tokens the cache holds.
    pub fn len(&self) -> usize {
        match self {
            Cache::Cpu(c) => c.len,
            #[cfg(feature = "cuda")]
            Cache::Cuda(c) => c.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
