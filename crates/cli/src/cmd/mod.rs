//! One module per subcommand, plus options several commands share.

pub mod inspect;
pub mod logits;
pub mod quantize;

use anyhow::{Result, bail};

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
}

/// Parses `--device`: `cpu`, or `auto` (the CPU until a GPU backend is built in).
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" | "auto" => Ok(Device::Cpu),
        d if d.starts_with("cuda") || d == "gpu" => {
            bail!("device '{d}' is not available: this build of molla has only the CPU backend")
        }
        d => bail!("unknown device '{d}' (expected cpu, cuda[:N], gpu or auto)"),
    }
}

/// Sizes the rayon pool; 0 keeps rayon's default (one thread per logical core).
pub fn set_threads(n: usize) -> Result<()> {
    if n > 0 {
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global()?;
    }
    Ok(())
}
