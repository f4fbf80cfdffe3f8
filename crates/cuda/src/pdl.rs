//! Programmatic dependent launch (compute capability 9.0 and up; `MOLLA_PDL=0` turns it off): a decode
//! kernel is launched as a dependent of the one before it on the stream, so its blocks are
//! scheduled while that kernel's last blocks still run (on the SMs they leave idle) and the
//! launch latency overlaps the previous kernel. Every kernel launched this way calls `pdl_wait()`
//! (kernels/common.cuh, PTX `griddepcontrol.wait`: until the previous grid has completed and its
//! writes are visible) before it reads or writes anything another kernel touches; before that it
//! may only read weights. Since each such kernel waits on its predecessor before it can
//! finish, a kernel also never runs ahead of the ones before that. Launches captured into the
//! decode graph become programmatic edges. On by default since session 25 (4-5% on the 8B's shape; docs/cuda-persistent.md).

use crate::device::Gpu;
use crate::error::{Result, drv};
use cudarc::driver::{CudaFunction, LaunchConfig, sys};
use std::ffi::c_void;

/// Launches kernel `f` with the kernel arguments whose addresses are `args` (in order; each
/// points at a value of the type the kernel takes) as a programmatic dependent launch.
///
/// # Safety
/// As for any kernel launch: the arguments match the kernel's parameters and every address they
/// hold is valid for what the kernel does with it; the kernel calls `pdl_wait()` before it touches
/// memory other kernels use.
pub(crate) unsafe fn launch(
    gpu: &Gpu,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &[*const c_void],
) -> Result<()> {
    gpu.ctx.bind_to_thread().map_err(drv("context"))?;
    // SAFETY: a zeroed attribute is a valid value of the plain C struct; its id and value are
    // set next.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let conf = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: gpu.stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut params: Vec<*mut c_void> = args.iter().map(|&p| p.cast_mut()).collect();
    // SAFETY: as the caller guarantees; `conf`, `attr` and `params` outlive the call, which
    // copies the argument values before it returns.
    unsafe {
        sys::cuLaunchKernelEx(
            &conf,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(drv("dependent launch"))
}

/// Launches kernel `$f` on `$gpu`'s stream under `$cfg` with the arguments `$arg` (references to
/// their values): as a programmatic dependent launch when the device and `MOLLA_PDL` allow it
/// ([`Gpu::pdl`]), else through cudarc's launch builder. Use it only for kernels that call
/// `pdl_wait()` first. Unsafe as any launch.
macro_rules! launch_dep {
    ($gpu:expr, $f:expr, $cfg:expr, $what:expr; $($arg:expr),+ $(,)?) => {{
        let (gpu, f, cfg) = ($gpu, $f, $cfg);
        crate::launch::count_launch();
        crate::launch::timeline_mark(gpu, stringify!($f), $what);
        if gpu.pdl {
            let args: &[*const std::ffi::c_void] =
                &[$( ($arg) as *const _ as *const std::ffi::c_void ),+];
            crate::pdl::launch(gpu, f, cfg, args)
        } else {
            let mut b = gpu.stream.launch_builder(f);
            $( b.arg($arg); )+
            b.launch(cfg).map(|_| ()).map_err(crate::error::drv($what))
        }
    }};
}

pub(crate) use launch_dep;
