//! Page-locked host words mapped into the device's address space: a kernel writes its few result
//! words there itself, and the host reads them once the launch is complete (an event after it),
//! with no copy queued on the stream between that kernel and the next one. Where the driver does
//! not map the memory (or `MOLLA_MAPPED=0`), the words are copied in after the kernel instead.

use crate::device::Gpu;
use crate::error::{Result, drv};
use cudarc::driver::{CudaSlice, CudaStream, result, sys};
use std::sync::Arc;

/// Whether mapped host memory may be used (`MOLLA_MAPPED`, default on; read once).
fn mapped_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_MAPPED").map_or(true, |v| v != "0"))
}

/// `len` page-locked u32 words, mapped for the device when the driver allows it.
pub(crate) struct HostWords {
    ptr: *mut u32,
    len: usize,
    /// The words' device address when mapped, else 0.
    dev: u64,
    stream: Arc<CudaStream>,
}

// SAFETY: the words are plain page-locked memory owned by this value, read and written through
// `&self` / `&mut self` only (and by kernels its owner queues).
unsafe impl Send for HostWords {}

impl HostWords {
    /// Allocates `len` (at least 1) words, zeroed; None when no page-locked memory can be had.
    pub(crate) fn new(gpu: &Gpu, len: usize) -> Result<Option<HostWords>> {
        gpu.ctx.bind_to_thread().map_err(drv("bind context"))?;
        let len = len.max(1);
        let bytes = len * 4;
        let alloc = |flags| {
            // SAFETY: plain allocation of page-locked host memory.
            unsafe { result::malloc_host(bytes, flags) }.ok()
        };
        let mapped = if mapped_on() {
            alloc(sys::CU_MEMHOSTALLOC_DEVICEMAP)
        } else {
            None
        };
        let (ptr, dev) = match mapped {
            Some(p) => {
                let mut d: sys::CUdeviceptr = 0;
                // SAFETY: p was allocated with DEVICEMAP above; d is an out-parameter.
                let ok = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) }
                    .result()
                    .is_ok();
                (p, if ok { d } else { 0 })
            }
            None => match alloc(0) {
                Some(p) => (p, 0),
                None => return Ok(None),
            },
        };
        let ptr = ptr.cast::<u32>();
        // SAFETY: ptr holds `bytes` bytes, just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(Some(HostWords {
            ptr,
            len,
            dev,
            stream: gpu.stream.clone(),
        }))
    }

    /// Whether kernels write the words themselves ([`dev_at`](Self::dev_at) is not 0).
    pub(crate) fn mapped(&self) -> bool {
        self.dev != 0
    }

    /// The device address of word `i` when mapped, else 0.
    pub(crate) fn dev_at(&self, i: usize) -> u64 {
        assert!(i < self.len, "word {i} of {}", self.len);
        if self.dev == 0 {
            0
        } else {
            self.dev + 4 * i as u64
        }
    }

    /// Queues the copy of `n` words of `src` into words `i ..`.
    ///
    /// # Safety
    /// Nothing reads those words before the copy completes (an event after it), and the copy
    /// completes before they are freed (drop synchronizes the stream).
    pub(crate) unsafe fn copy_in(
        &mut self,
        gpu: &Gpu,
        i: usize,
        src: &CudaSlice<f32>,
        n: usize,
    ) -> Result<()> {
        assert!(
            i + n <= self.len && n <= src.len(),
            "copy of {n} words at {i}"
        );
        // SAFETY: the range lies in the allocation (checked); as the caller guarantees.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(self.ptr.add(i), n);
            result::memcpy_dtoh_async(dst, gpu.ptr(src), gpu.stream.cu_stream())
        }
        .map_err(drv("pick download"))
    }

    /// Words `0 .. n` as f32 values.
    ///
    /// # Safety
    /// Whatever wrote them (a kernel or a copy) is complete, and nothing writes them while the
    /// slice lives.
    pub(crate) unsafe fn f32s(&self, n: usize) -> &[f32] {
        assert!(n <= self.len, "{n} of {} words", self.len);
        // SAFETY: the range lies in the allocation (checked); as the caller guarantees.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<f32>(), n) }
    }

    /// Words `i .. i + N`.
    ///
    /// # Safety
    /// Whatever wrote them (a kernel or a copy) is complete.
    pub(crate) unsafe fn read<const N: usize>(&self, i: usize) -> [u32; N] {
        assert!(i + N <= self.len, "read of {N} words at {i}");
        let mut w = [0u32; N];
        // SAFETY: the range lies in the allocation (checked); volatile, since a device wrote
        // the words behind the compiler's back.
        for (j, v) in w.iter_mut().enumerate() {
            *v = unsafe { self.ptr.add(i + j).read_volatile() };
        }
        w
    }
}

impl Drop for HostWords {
    fn drop(&mut self) {
        // No kernel or copy may still write the words when they are freed.
        let _ = crate::watchdog::watched("mapped words' last writer", || self.stream.synchronize());
        // SAFETY: allocated by cuMemHostAlloc above; the context outlives the stream we hold.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}
