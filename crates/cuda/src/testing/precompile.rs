//! The kernel cache filled ahead of time, on a machine without a GPU, for one with it: the main
//! program and each model's persistent kernel (plain and packed builds, and the packed one for
//! short caches), compiled with NVRTC for compute capability `cc` and stored under the keys
//! `compile::cubin` looks them up by on a device whose driver reports `driver`
//! (`cuDriverGetVersion`). A device call otherwise spends its first
//! process's first half minute compiling (docs/cuda-persistent.md, session 27). The keys hold
//! NVRTC's version too: the NVRTC here must be the one the device has (13.0 for its CUDA 13.0
//! toolkit), or the device misses the cache and compiles as before. A CUBIN the driver refuses is
//! compiled again there (`compile::recompile`).

use crate::compile::{self, PkBuild, Program};
use crate::error::Result;
use std::path::PathBuf;

/// Compiles the main program and, for each model, its persistent kernel as `Gpu::with_build`,
/// `Gpu::persistent_packed` and `Gpu::persistent_short` ask for it, into the disk cache (`MOLLA_CACHE`); returns the
/// cache files (compiled now or already there).
pub fn precompile(models: &[&model::Model], cc: (i32, i32), driver: i32) -> Result<Vec<PathBuf>> {
    // The main program for blocks as the file stores them, and for padded ones (a model with
    // Q8_0, Q4_0 or Q5_0 layers: `PkBuild::legpad`).
    let mut programs = vec![Program::MAIN, Program::Main { legpad: true }];
    for m in models {
        let build = crate::persistent::pk_build(m);
        for b in [
            build,
            PkBuild {
                packed: true,
                ..build
            },
            PkBuild {
                packed: true,
                short: true,
                ..build
            },
        ] {
            if !programs.contains(&Program::Persistent(b)) {
                programs.push(Program::Persistent(b));
            }
        }
    }
    let mut files = Vec::new();
    for p in programs {
        let (_, _) = compile::cubin(cc, driver, p)?;
        files.extend(compile::cache_path(cc, driver, p));
    }
    Ok(files)
}
