//! One CUDA device: its context, the stream every operation runs on, and the compiled kernels.

use crate::compile;
use crate::error::{CudaError, Result, drv};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
};
use cudarc::nvrtc::Ptx;
use std::sync::{Arc, Mutex, OnceLock};

/// Whether the driver library loads and reports at least one device. Never panics.
pub fn is_available() -> bool {
    std::panic::catch_unwind(|| {
        libs_present()
            && cudarc::driver::result::init().is_ok()
            && CudaContext::device_count().is_ok_and(|n| n > 0)
    })
    .unwrap_or(false)
}

fn libs_present() -> bool {
    // SAFETY: these only try to open the shared libraries.
    unsafe { cudarc::driver::sys::is_culib_present() && cudarc::nvrtc::sys::is_culib_present() }
}

/// The kernels of the program (kernels/*.cu).
pub(crate) struct Kernels {
    pub matvec: CudaFunction,
    /// The same over a batch of input rows (one token of each of several sequences).
    pub matvec_multi: CudaFunction,
    /// `matvec` for fixed-point rows (`Out::fixed`).
    pub matvec_fx: CudaFunction,
    /// `matvec_multi` for fixed-point rows (`Out::fixed`).
    pub matvec_multi_fx: CudaFunction,
    /// Its first pass: each input row prepared once.
    pub matvec_prep: CudaFunction,
    /// Decode matvec of big matrices on an input prepared once (by `matvec_prep_wide`).
    pub matvec_wide: CudaFunction,
    pub matvec_prep_wide: CudaFunction,
    /// `matvec_wide` preparing its own RMSNorm input: built only under `MOLLA_KDEFS=WIDEPREP`
    /// (an experiment, launch.rs `matvec_wide_flag`).
    pub matvec_wide_norm: Option<CudaFunction>,
    /// Rope, cache store and attention of one decode token in one launch.
    pub rope_attention: CudaFunction,
    /// Holds the stream for a while (the kernel timeline).
    pub hold: CudaFunction,
    pub matmul: CudaFunction,
    pub rms_norm: CudaFunction,
    /// RMSNorm in place, a row a block (qwen3's per-head q/k norms).
    pub rms_norm_inplace: CudaFunction,
    pub rope_store: CudaFunction,
    pub rope_store_f32: CudaFunction,
    pub attention: CudaFunction,
    pub attention_f32: CudaFunction,
    pub embed: CudaFunction,
    pub swiglu: CudaFunction,
    /// gelu_tanh(g) * u (gemma's GeGLU, prefill).
    pub geglu: CudaFunction,
    /// x += norm(h) * scale (a branch onto the residual stream: gemma's post-norms, granite's
    /// residual scale).
    pub add_branch: CudaFunction,
    /// x scaled, then soft-capped (gemma's and granite's embedding scales; granite's and
    /// gemma2's logits).
    pub scale_cap: CudaFunction,
    pub gather_rows: CudaFunction,
    /// The greedy pick of a row of logits (kernels/pick.cu).
    pub pick_greedy: CudaFunction,
    /// `matvec_wide` of a head with the greedy pick of its output (kernels/pick.cu).
    pub matvec_wide_pick: CudaFunction,
    pub matvec_wide_host: CudaFunction,
    /// The top k logits of a row (kernels/pick.cu).
    pub pick_top: CudaFunction,
    /// The persistent decode kernel.
    pub decode_persistent: CudaFunction,
    /// f16 operands for the cuBLAS prefill GEMM.
    pub dequant_f16: CudaFunction,
    pub to_f16: CudaFunction,
    pub add_bias_rows: CudaFunction,
    _modules: [Arc<CudaModule>; 2],
}

/// `program` compiled for compute capability `cc` (or read from the disk cache) and loaded.
fn load_program(
    ctx: &Arc<CudaContext>,
    cc: (i32, i32),
    driver_version: i32,
    program: compile::Program,
) -> Result<Arc<CudaModule>> {
    let (bin, cached) = compile::cubin(cc, driver_version, program)?;
    match ctx.load_module(Ptx::from_binary(bin)) {
        Ok(m) => Ok(m),
        Err(e) => match cached {
            // A stale or damaged cache entry: compile afresh.
            Some(path) => ctx
                .load_module(Ptx::from_binary(compile::recompile(cc, &path, program)?))
                .map_err(drv("module load")),
            None => Err(drv("module load")(e)),
        },
    }
}

/// Page-locked host memory that downloads go through: the driver stages a copy into pageable
/// memory through its own buffers, which costs more per token than one copy out of this.
struct Staging {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the pointer is owned (cuMemHostAlloc) and only used under the Gpu's mutex.
unsafe impl Send for Staging {}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in this process; the context outlives it (Gpu's
        // first field); no copy into it is in flight (every download waits for its stream).
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr.cast()) };
    }
}

/// A CUDA device ready to run molla's kernels: a context, one stream, the loaded program.
pub struct Gpu {
    /// Pinned staging for downloads (`None` until the first, or when `MOLLA_PINNED=0` or the
    /// allocation failed). First, so it is freed while the context lives.
    staging: Mutex<Option<Staging>>,
    pinned: bool,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) k: Kernels,
    name: String,
    /// Largest dynamic shared memory a block may use, in bytes.
    pub(crate) max_smem: usize,
    /// The same for the persistent decode kernels.
    pub(crate) pk_max_smem: usize,
    /// Dynamic shared memory `rope_attention` may take.
    pub(crate) att_max_smem: usize,
    /// Decode kernels launch as programmatic dependents of the kernel before them (crate::pdl):
    /// compute capability 9.0 and up unless `MOLLA_PDL=0`.
    pub(crate) pdl: bool,
    /// Q6_K blocks are padded to 224 bytes on the device (kernels/common.cuh `Q6K_BYTES`), unless
    /// `MOLLA_KDEFS` names `Q6FILE` (the file's 210-byte blocks, for comparison).
    pub(crate) q6pad: bool,
    /// Q8_0, Q4_0 and Q5_0 blocks padded on the device (weights.rs `pad_legacy`, kernels/
    /// common.cuh `LEGPAD`), as the kernels were built for (`PkBuild::legpad`).
    pub(crate) legpad: bool,
    /// Streaming multiprocessors.
    pub(crate) sm_count: usize,
    /// What the persistent kernel was built for (weight types, head shape).
    pub(crate) pk_build: compile::PkBuild,
    /// The same kernel for step lists whose every matvec step is packed, loaded on first use
    /// (`persistent_packed`); None when it did not load.
    pk_packed: OnceLock<Option<CudaFunction>>,
    /// That one built for short caches too (`persistent_short`), likewise.
    pk_short: OnceLock<Option<CudaFunction>>,
    cc: (i32, i32),
    driver_version: i32,
}

/// Lets `f` take as much dynamic shared memory as the opt-in limit leaves beside its static
/// shared memory (at least what 48 KiB leaves), and returns that allowance.
fn allow_dynamic_smem(f: &CudaFunction, optin: i32) -> Result<i32> {
    let st = f.shared_size_bytes().map_err(drv("kernel attribute"))?;
    let allow = (optin - st).max(48 * 1024 - st).max(0);
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        allow,
    )
    .map_err(drv("kernel attribute"))?;
    Ok(allow)
}

/// The shared-memory split every kernel of the main program asks for, in percent of the SM's
/// unified L1 (`CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`), or None for the driver's
/// choice, kernel by kernel (`MOLLA_CARVEOUT=off`; `MOLLA_CARVEOUT=P` sets P, 0-100). An SM changes its
/// split only when empty, and the driver's choice follows each kernel's own need, so a decode
/// step's launches asked for several (the 8B's graph: rope_attention's 128 KiB of staged keys and
/// values, down's 35 KiB input four blocks an SM, the other matvecs' 8.5 KiB) and a dependent
/// launch's blocks waited for SMs to drain. One split that holds the largest of them,
/// rope_attention's block (`att_block` bytes with its static shared memory) plus the per-block
/// reservation, out of `sm_smem`: 57% on Hopper (132 KiB). Measured on the H100 (session 50, the
/// 8B Q4_K_M file, tg128 alternating three rounds): 58% 387.5-387.9 tok/s against 358.6-358.7 by
/// the driver's choice; 65% 387.7; 50% 362 (too small: the driver takes more for some kernels);
/// 86% and 100% 376 (the L1 shrinks); the small models' persistent path level.
fn carveout_percent(att_block: usize, reserved: usize, sm_smem: usize) -> Option<i32> {
    carveout_of(
        std::env::var("MOLLA_CARVEOUT").ok().as_deref(),
        att_block,
        reserved,
        sm_smem,
    )
}

/// carveout_percent with `MOLLA_CARVEOUT`'s value `env`.
fn carveout_of(
    env: Option<&str>,
    att_block: usize,
    reserved: usize,
    sm_smem: usize,
) -> Option<i32> {
    if env == Some("off") {
        return None;
    }
    // A value that is not a percentage is ignored: the computed split, as when unset.
    let set = env.and_then(|v| v.parse::<i32>().ok().filter(|p| (0..=100).contains(p)));
    let computed =
        (sm_smem > 0).then(|| ((att_block + reserved) * 100).div_ceil(sm_smem).min(100) as i32);
    set.or(computed)
}

/// Sets `percent` (carveout_percent) on every kernel of the main program a decode step launches.
fn set_carveout(k: &Kernels, percent: Option<i32>) -> Result<()> {
    let Some(p) = percent else { return Ok(()) };
    for f in [
        &k.matvec,
        &k.matvec_prep,
        &k.matvec_wide,
        &k.matvec_prep_wide,
        &k.matvec_wide_pick,
        &k.matvec_wide_host,
        &k.rope_attention,
        &k.embed,
        &k.pick_greedy,
    ]
    .into_iter()
    .chain(&k.matvec_wide_norm)
    {
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            p,
        )
        .map_err(drv("kernel attribute"))?;
    }
    Ok(())
}

impl Gpu {
    /// Opens device `ordinal`, compiles (or loads from the disk cache) the kernels for its
    /// architecture. A clear error, never a panic, when there is no driver or device.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        let legpad = crate::persistent::legpad_forced().unwrap_or(false);
        Gpu::with_build(
            ordinal,
            compile::PkBuild {
                legpad,
                ..Default::default()
            },
        )
    }

    /// [`Gpu::new`] with the persistent decode kernel built for one model (`persistent::pk_build`):
    /// its weight types only (a kernel a third the size) and its head shape. Its step lists must
    /// use no other type and its launches no other head shape (`Persistent::new` checks).
    pub(crate) fn with_build(ordinal: usize, pk_build: compile::PkBuild) -> Result<Gpu> {
        std::panic::catch_unwind(|| Gpu::open(ordinal, pk_build)).unwrap_or_else(|_| {
            Err(CudaError::Driver {
                what: "initialisation",
                msg: "the driver panicked".into(),
            })
        })
    }

    fn open(ordinal: usize, pk_build: compile::PkBuild) -> Result<Gpu> {
        // SAFETY: only tries to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        // SAFETY: as above.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::NoNvrtc);
        }
        cudarc::driver::result::init().map_err(drv("cuInit"))?;
        let count = CudaContext::device_count()
            .map_err(drv("device count"))?
            .max(0) as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("context"))?;
        // One stream, ordered by hand: no per-buffer events (they would also break graph capture).
        // SAFETY: called before any buffer of this context exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(drv("stream"))?;
        let cc = ctx
            .compute_capability()
            .map_err(drv("compute capability"))?;
        let mut driver_version = 0;
        // SAFETY: out-parameter.
        let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
        // Both programs decode the weights' blocks as they are uploaded (padded or not).
        let legpad = pk_build.legpad;
        let module = load_program(&ctx, cc, driver_version, compile::Program::Main { legpad })?;
        // A kernel built for the model that does not compile (a shape no test has met) falls back
        // to the generic one, which every model can use.
        let pk = |b| load_program(&ctx, cc, driver_version, compile::Program::Persistent(b));
        let generic = compile::PkBuild {
            legpad,
            ..Default::default()
        };
        let (pk_module, pk_build) = match pk(pk_build) {
            Ok(m) => (m, pk_build),
            Err(_) if pk_build != generic => (pk(generic)?, generic),
            Err(e) => return Err(e),
        };
        let f = |name: &str| module.load_function(name).map_err(drv("kernel lookup"));
        let k = Kernels {
            matvec: f("matvec")?,
            matvec_multi: f("matvec_multi")?,
            matvec_multi_fx: f("matvec_multi_fx")?,
            matvec_fx: f("matvec_fx")?,
            matvec_prep: f("matvec_prep")?,
            matvec_wide: f("matvec_wide")?,
            matvec_prep_wide: f("matvec_prep_wide")?,
            matvec_wide_norm: if compile::experiment("WIDEPREP") {
                Some(f("matvec_wide_norm")?)
            } else {
                None
            },
            hold: f("hold")?,
            rope_attention: f("rope_attention")?,
            matmul: f("matmul")?,
            rms_norm: f("rms_norm")?,
            rms_norm_inplace: f("rms_norm_inplace")?,
            rope_store: f("rope_store")?,
            rope_store_f32: f("rope_store_f32")?,
            attention: f("attention")?,
            attention_f32: f("attention_f32")?,
            embed: f("embed")?,
            swiglu: f("swiglu")?,
            geglu: f("geglu")?,
            add_branch: f("add_branch")?,
            scale_cap: f("scale_cap")?,
            gather_rows: f("gather_rows")?,
            pick_greedy: f("pick_greedy")?,
            matvec_wide_pick: f("matvec_wide_pick")?,
            matvec_wide_host: f("matvec_wide_host")?,
            pick_top: f("pick_top")?,
            decode_persistent: pk_module
                .load_function("decode_persistent")
                .map_err(drv("kernel lookup"))?,
            dequant_f16: f("dequant_f16")?,
            to_f16: f("to_f16")?,
            add_bias_rows: f("add_bias_rows")?,
            _modules: [module, pk_module],
        };
        let optin = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(drv("device attribute"))?;
        // The dynamic allowance is what the opt-in limit leaves beside a kernel's static shared
        // memory: one for all of these (launches size their inputs by it), the least any of them
        // can take, so that no kernel is asked for more than the limit (a kernel added with a
        // larger static block failed every device open: 310be3b).
        let shared: Vec<&CudaFunction> = [
            &k.matvec,
            &k.matvec_fx,
            &k.matvec_multi,
            &k.matvec_multi_fx,
            &k.matvec_prep,
            &k.matvec_wide,
            &k.matvec_wide_host,
            &k.matvec_prep_wide,
        ]
        .into_iter()
        .chain(&k.matvec_wide_norm)
        .collect();
        let mut max_smem = i32::MAX;
        for f in &shared {
            let st = f.shared_size_bytes().map_err(drv("kernel attribute"))?;
            max_smem = max_smem.min((optin - st).max(48 * 1024 - st).max(0));
        }
        for f in shared {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                max_smem,
            )
            .map_err(drv("kernel attribute"))?;
        }
        let max_smem = max_smem as usize;
        // rope_attention's allowance (it stages a head's keys and values: att_stage_cap).
        let att_max_smem = allow_dynamic_smem(&k.rope_attention, optin)?;
        // matvec_wide_pick's static shared memory (the pick's block reduction) exceeds matvec's,
        // so its allowance is its own (the opt-in limit less that; in the list above it asked
        // for more than the limit, and every device open failed: 310be3b, mended in session 55).
        // Its launch takes a q16 row.
        allow_dynamic_smem(&k.matvec_wide_pick, optin)?;
        let pk_max_smem = allow_dynamic_smem(&k.decode_persistent, optin)? as usize;
        let att_block = crate::launch::att_stage_bytes(att_max_smem as usize)
            + k.rope_attention
                .shared_size_bytes()
                .map_err(drv("kernel attribute"))? as usize;
        let dev_attr = |a| ctx.attribute(a).map_err(drv("device attribute"));
        let reserved =
            dev_attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)?;
        let sm_smem =
            dev_attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
        set_carveout(
            &k,
            carveout_percent(att_block, reserved.max(0) as usize, sm_smem.max(0) as usize),
        )?;
        let pdl = compile::pdl(cc);
        let q6pad = !compile::experiment("Q6FILE");
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv("device attribute"))?
            .max(1) as usize;
        let name = ctx
            .name()
            .unwrap_or_else(|_| format!("CUDA device {ordinal}"));
        Ok(Gpu {
            staging: Mutex::new(None),
            pinned: std::env::var("MOLLA_PINNED").map_or(true, |v| v != "0"),
            ctx,
            stream,
            k,
            name,
            max_smem,
            att_max_smem: att_max_smem as usize,
            pk_max_smem,
            pdl,
            q6pad,
            legpad,
            sm_count,
            pk_build,
            pk_packed: OnceLock::new(),
            pk_short: OnceLock::new(),
            cc,
            driver_version,
        })
    }

    /// The main program's module (every kernel but the persistent one), for its globals.
    pub(crate) fn main_module(&self) -> &Arc<CudaModule> {
        &self.k._modules[0]
    }

    /// The persistent kernel built as `pk_build` is but for packed step lists only
    /// (`PkBuild::packed`): compiled (or read from the disk cache) on first use, with the same
    /// shared-memory allowance as the other. None when it does not build or load.
    pub(crate) fn persistent_packed(&self) -> Option<&CudaFunction> {
        self.pk_packed
            .get_or_init(|| self.persistent_variant(true, false))
            .as_ref()
    }

    /// The kernel `persistent_packed` gives, built for short caches as well
    /// (`PkBuild::short`), likewise.
    pub(crate) fn persistent_short(&self) -> Option<&CudaFunction> {
        self.pk_short
            .get_or_init(|| self.persistent_variant(true, true))
            .as_ref()
    }

    fn persistent_variant(&self, packed: bool, short: bool) -> Option<CudaFunction> {
        let build = compile::PkBuild {
            packed,
            short,
            ..self.pk_build
        };
        self.ctx.bind_to_thread().ok()?;
        let program = compile::Program::Persistent(build);
        let m = load_program(&self.ctx, self.cc, self.driver_version, program).ok()?;
        let f = m.load_function("decode_persistent").ok()?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            self.pk_max_smem as i32,
        )
        .ok()?;
        Some(f)
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Copies host data into a new device buffer.
    pub(crate) fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        if data.is_empty() {
            // Zero-sized allocations are refused by the driver; keep one element.
            // SAFETY: the element is never read.
            return unsafe { self.stream.alloc::<T>(1) }.map_err(drv("alloc"));
        }
        self.stream.clone_htod(data).map_err(drv("upload"))
    }

    /// A zeroed device buffer of `len` elements (at least one).
    pub(crate) fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream.alloc_zeros(len.max(1)).map_err(drv("alloc"))
    }

    /// Copies `dst.len()` elements from `src` (which must hold at least that many) to the host,
    /// then waits for the stream, surfacing any kernel error.
    pub(crate) fn download<T: DeviceRepr + Copy + Default>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut [T],
    ) -> Result<()> {
        let n = dst.len();
        self.download_with(src, n, |s| dst.copy_from_slice(s))
    }

    /// The first `n` elements of `src`, read on the host by `f` where they land: the pinned
    /// staging buffer (one DMA and no further copy, as llama.cpp reads its logits), or a fresh
    /// vector when page-locked memory cannot be had. Waits for the stream first, surfacing any
    /// kernel error.
    pub(crate) fn download_with<T: DeviceRepr + Copy + Default, R>(
        &self,
        src: &CudaSlice<T>,
        n: usize,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        if n > src.len() {
            return Err(CudaError::Length {
                what: "download",
                got: src.len(),
                expected: n,
            });
        }
        if n == 0 {
            self.sync()?;
            return Ok(f(&[]));
        }
        crate::launch::timeline_mark(self, "download", "download");
        let bytes = n * std::mem::size_of::<T>();
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if self.pinned && staging.as_ref().is_none_or(|s| s.bytes < bytes) {
            *staging = None;
            let want = bytes.next_power_of_two();
            self.ctx.bind_to_thread().map_err(drv("bind context"))?;
            // SAFETY: plain allocation of page-locked host memory.
            if let Ok(p) = unsafe { cudarc::driver::result::malloc_host(want, 0) } {
                *staging = Some(Staging {
                    ptr: p.cast(),
                    bytes: want,
                })
            }
        }
        match staging.as_ref() {
            Some(st) => {
                // SAFETY: the staging buffer holds at least `bytes` and is aligned for any T
                // (page-locked allocations are page-aligned); src holds at least n elements
                // (checked above); the copy is complete after the stream sync, before the
                // elements are read, and the lock keeps other downloads out meanwhile.
                unsafe {
                    let tmp = std::slice::from_raw_parts_mut(st.ptr, bytes);
                    cudarc::driver::result::memcpy_dtoh_async(
                        tmp,
                        self.ptr(src),
                        self.stream.cu_stream(),
                    )
                    .map_err(drv("download"))?;
                    self.sync()?;
                    Ok(f(std::slice::from_raw_parts(st.ptr.cast::<T>(), n)))
                }
            }
            None => {
                drop(staging);
                let mut v = vec![T::default(); n];
                crate::watchdog::watched("download", || {
                    self.stream.memcpy_dtoh(&src.slice(..n), &mut v)
                })
                .map_err(drv("download"))?;
                self.sync()?;
                Ok(f(&v))
            }
        }
    }

    /// Waits for all queued work.
    pub(crate) fn sync(&self) -> Result<()> {
        crate::watchdog::watched("kernel execution", || self.stream.synchronize())
            .map_err(drv("kernel execution"))
    }

    /// Zeroes a buffer.
    pub(crate) fn clear<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        dst: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.stream.memset_zeros(dst).map_err(drv("memset"))
    }

    /// Copies host data into the front of an existing buffer.
    pub(crate) fn write<T: DeviceRepr>(&self, src: &[T], dst: &mut CudaSlice<T>) -> Result<()> {
        if src.len() > dst.len() {
            return Err(CudaError::Length {
                what: "device buffer",
                got: dst.len(),
                expected: src.len(),
            });
        }
        if src.is_empty() {
            return Ok(());
        }
        self.stream
            .memcpy_htod(src, &mut dst.slice_mut(..src.len()))
            .map_err(drv("upload"))
    }

    /// The raw device address of a buffer, for kernel arguments.
    pub(crate) fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.stream);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::carveout_of;

    #[test]
    fn carveout_holds_the_staged_attention_block() {
        // Hopper: 228 KiB an SM, 1 KiB reserved a block, 128 KiB staged plus static memory.
        let (sm, res) = (228 * 1024, 1024);
        assert_eq!(carveout_of(None, 128 * 1024 + 1536, res, sm), Some(58));
        assert_eq!(carveout_of(None, 128 * 1024, 0, sm), Some(57));
        assert_eq!(carveout_of(None, 400 * 1024, res, sm), Some(100));
        assert_eq!(carveout_of(None, 1024, res, 0), None);
        assert_eq!(carveout_of(Some("off"), 1024, res, sm), None);
        assert_eq!(carveout_of(Some("65"), 1024, res, sm), Some(65));
        assert_eq!(carveout_of(Some("101"), 128 * 1024, 0, sm), Some(57));
        assert_eq!(carveout_of(Some("x"), 128 * 1024, 0, sm), Some(57));
        assert_eq!(carveout_of(Some("x"), 1024, res, 0), None);
    }
}
