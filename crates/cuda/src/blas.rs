//! The prefill matmul on tensor cores: the weight matrix dequantized to f16 (kernels/convert.cu),
//! the activations rounded to f16, and cuBLAS's GemmEx with f32 accumulation and an f32 result
//! (bias and residual as in the SIMT matmul). cuBLAS is loaded at run time; without it (or with
//! `MOLLA_CUBLAS=0`) prefill keeps the SIMT tiled matmul.
//!
//! The activations are split into an f16 part and the f16 of what it misses (`x ≈ hi + lo`,
//! about 22 bits), and a second GEMM adds W·lo: twice the GEMM work for activations about as
//! exact as f32 (on the H200, a row's relative error against an f64 dot of the same f16 weights
//! is ~2e-7 instead of ~2e-4). The weights' own rounding to f16 stays (a block's scale times its
//! quant needs more than f16's 11 bits): the 8B shape's 600-token prefill is within 1.5e-2 of the
//! CPU in log-prob, its one-token-a-step decode within 2.5e-3.
//! `MOLLA_CUBLAS_SPLIT=0` keeps the single f16 GEMM.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch::{self, Out};
use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::ffi::c_void;

/// A cuBLAS handle on the model's stream and the f16 scratch it multiplies.
pub(crate) struct Blas {
    handle: CudaBlas,
    w16: CudaSlice<u16>,
    /// hi, then (split) lo: each up to `max_x` values.
    x16: CudaSlice<u16>,
    pub(crate) split: bool,
}

/// Whether the prefill uses cuBLAS: not yet tried, unavailable, or ready.
pub(crate) enum BlasState {
    Untried,
    Absent,
    Ready(Box<Blas>),
}

impl Blas {
    /// A handle and scratch for matrices of up to `max_w` weights and inputs of up to `max_x`
    /// values; `None` when cuBLAS cannot be loaded or is turned off.
    pub fn new(gpu: &Gpu, max_w: usize, max_x: usize) -> Result<Option<Blas>> {
        if std::env::var("MOLLA_CUBLAS").is_ok_and(|v| v == "0") {
            return Ok(None);
        }
        // SAFETY: only tries to open the shared library.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Ok(None);
        }
        let stream = gpu.stream.clone();
        let handle = match std::panic::catch_unwind(move || CudaBlas::new(stream)) {
            Ok(Ok(h)) => h,
            _ => return Ok(None),
        };
        let split = std::env::var("MOLLA_CUBLAS_SPLIT").map_or(true, |v| v != "0");
        Ok(Some(Blas {
            handle,
            w16: gpu.zeros(max_w)?,
            x16: gpu.zeros(if split { 2 * max_x } else { max_x })?,
            split,
        }))
    }

    /// `y[t][r] = W[r]·x[t]` (+ bias) (+ y), `n` rows of `x` (device f32).
    ///
    /// # Safety
    /// As `launch::matmul`: every address is live and sized for the shapes.
    pub unsafe fn matmul(&mut self, gpu: &Gpu, o: &Out, x: u64, n: usize) -> Result<()> {
        let w = o.w;
        let parts = if self.split { 2 } else { 1 };
        if w.rows * w.cols > self.w16.len() || parts * n * w.cols > self.x16.len() {
            return Err(CudaError::Unsupported("cuBLAS scratch too small".into()));
        }
        let (w16, x16) = {
            let (a, _s1) = self.w16.device_ptr_mut(&gpu.stream);
            let (b, _s2) = self.x16.device_ptr(&gpu.stream);
            (a, b)
        };
        let lo = if self.split {
            x16 + (2 * n * w.cols) as u64
        } else {
            0
        };
        // SAFETY: the scratch holds rows*cols and parts*n*cols values (checked above).
        unsafe {
            launch::dequant_f16(gpu, &w, w16)?;
            launch::to_f16(gpu, x, x16, lo, n * w.cols)?;
        }
        // SAFETY: as the caller guarantees, and the scratch as above.
        unsafe { self.gemm(o, w16, x16, n, o.accumulate)? };
        if self.split {
            // SAFETY: as above; this one adds onto what the first wrote.
            unsafe { self.gemm(o, w16, lo, n, true)? };
        }
        if o.bias != 0 {
            // SAFETY: y holds n rows of w.rows values; the bias w.rows.
            unsafe { launch::add_bias_rows(gpu, o.y, o.bias, w.rows, n)? };
        }
        Ok(())
    }

    /// `y = W16·x16` (+ y when `add`), f32 accumulation and result.
    ///
    /// # Safety
    /// `w16` holds o.w's rows*cols f16 values, `x16` n*cols, `o.y` n*rows f32.
    unsafe fn gemm(&self, o: &Out, w16: u64, x16: u64, n: usize, add: bool) -> Result<()> {
        let w = o.w;
        let (alpha, beta) = (1.0f32, if add { 1.0f32 } else { 0.0 });
        // Row-major W (rows x cols) is column-major cols x rows: op(A) = A^T gives rows x cols;
        // row-major x (n x cols) is column-major cols x n; y (n x rows) is column-major rows x n.
        // SAFETY: pointers are live device buffers of the sizes the dimensions imply; the
        // scalars live on the host (the handle's default pointer mode).
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.handle.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                w.rows as i32,
                n as i32,
                w.cols as i32,
                (&alpha as *const f32).cast::<c_void>(),
                w16 as *const c_void,
                cudaDataType::CUDA_R_16F,
                w.cols as i32,
                x16 as *const c_void,
                cudaDataType::CUDA_R_16F,
                w.cols as i32,
                (&beta as *const f32).cast::<c_void>(),
                o.y as *mut c_void,
                cudaDataType::CUDA_R_32F,
                w.rows as i32,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Driver {
            what: "cuBLAS GemmEx",
            msg: format!("{e:?}"),
        })?;
        launch::count_launch();
        Ok(())
    }
}
