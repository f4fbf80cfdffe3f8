//! Errors of the CUDA backend.

use gguf::GgmlType;

/// Why the CUDA backend could not do what was asked. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("cuda: the CUDA driver library (libcuda) could not be loaded")]
    NoDriver,
    #[error("cuda: the NVRTC library (libnvrtc) could not be loaded")]
    NoNvrtc,
    #[error("cuda: no device with ordinal {ordinal} ({count} found)")]
    NoDevice { ordinal: usize, count: usize },
    #[error("cuda: {what}: {msg}")]
    Driver { what: &'static str, msg: String },
    #[error("cuda: kernel compilation failed: {0}")]
    Compile(String),
    #[error("cuda: tensor '{name}' has type {ty}, which the CUDA backend does not support")]
    UnsupportedType { name: String, ty: GgmlType },
    #[error("cuda: {0}")]
    Unsupported(String),
    #[error("cuda: {what} holds {got} elements, expected {expected}")]
    Length {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    /// Bad forward input, found by the checks all backends share.
    #[error(transparent)]
    Input(#[from] cpu::CpuError),
    #[error("forward: KV cache was made by a different CUDA model")]
    CacheShape,
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, CudaError>;

/// Maps a driver error to a one-line [`CudaError::Driver`] naming the step that failed.
pub(crate) fn drv(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        what,
        msg: one_line(&format!("{e}")),
    }
}

/// Collapses a multi-line message (a compiler log) into one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}
