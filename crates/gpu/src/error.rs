//! Errors of the wgpu backend.

/// Why the GPU backend could not do something. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "gpu: no GPU adapter found ({0}); on Linux install a Vulkan driver (Debian: mesa-vulkan-drivers)"
    )]
    NoAdapter(String),
    #[error("gpu: could not open the device: {0}")]
    Device(String),
    #[error("gpu: {0}")]
    Wgpu(String),
    #[error("gpu: {0} is not supported by the wgpu backend")]
    Unsupported(String),
    #[error("gpu: KV cache was made for a different model")]
    CacheShape,
    #[error(transparent)]
    Cpu(#[from] cpu::CpuError),
}

pub type Result<T> = std::result::Result<T, GpuError>;
