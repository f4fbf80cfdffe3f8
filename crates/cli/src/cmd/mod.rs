//! One module per subcommand, plus options several commands share.

pub mod bench;
pub mod chat;
mod gen_args;
pub mod inspect;
pub mod logits;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod tokenize;

use anyhow::{Result, bail};

pub use server::Device;

/// Parses `--device`: `cpu`, `cuda`, `cuda:N`, `gpu` (wgpu), or `auto` (the first CUDA device
/// when one is usable, else a hardware wgpu adapter in a build with the `gpu` feature, else the
/// CPU).
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(if cuda_available() {
            Device::Cuda(0)
        } else if gpu_available() {
            Device::Gpu
        } else {
            Device::Cpu
        }),
        "cuda" => Ok(Device::Cuda(0)),
        d if d.starts_with("cuda:") => d[5..]
            .parse()
            .map(Device::Cuda)
            .map_err(|_| anyhow::anyhow!("--device: '{d}' is not cuda:N with N a device number")),
        #[cfg(feature = "gpu")]
        "gpu" => Ok(Device::Gpu),
        #[cfg(not(feature = "gpu"))]
        "gpu" => bail!(
            "device 'gpu' (wgpu) is not available in this build of molla (build with --features gpu)"
        ),
        d => bail!("unknown device '{d}' (expected cpu, cuda, cuda:N, gpu or auto)"),
    }
}

#[cfg(feature = "cuda")]
fn cuda_available() -> bool {
    cuda::is_available()
}

#[cfg(not(feature = "cuda"))]
fn cuda_available() -> bool {
    false
}

/// A hardware adapter for the wgpu backend (a software one such as llvmpipe is slower than the
/// CPU backend, so `auto` does not pick it).
#[cfg(feature = "gpu")]
fn gpu_available() -> bool {
    gpu::has_hardware_adapter()
}

#[cfg(not(feature = "gpu"))]
fn gpu_available() -> bool {
    false
}

/// Parses `--cache-type`.
pub fn parse_cache_type(s: &str) -> Result<cpu::CacheType> {
    cpu::CacheType::parse(s).ok_or_else(|| anyhow::anyhow!("--cache-type: '{s}' is not f32 or f16"))
}

/// Applies `--cache-type` when given; without it each backend keeps its default (f32 on the CPU
/// and wgpu, f16 on CUDA).
pub fn apply_cache_type(backend: &mut crate::backend::Backend, s: Option<&str>) -> Result<()> {
    if let Some(s) = s {
        backend.set_cache_type(parse_cache_type(s)?);
    }
    Ok(())
}

/// Sizes the rayon pool; 0 keeps rayon's default (one thread per logical core).
pub fn set_threads(n: usize) -> Result<()> {
    if n > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()?;
    }
    Ok(())
}
