//! Errors raised while binding a GGUF file to an architecture.

use gguf::GgmlType;

/// Why a model could not be loaded. Every message is one line and names what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    #[error(transparent)]
    Quant(#[from] quant::QuantError),
    #[error("model: unsupported architecture '{0}' (supported: {names})", names = crate::arch::names().join(", "))]
    UnsupportedArch(String),
    #[error("model: metadata key '{0}' is missing")]
    MissingKey(String),
    #[error("model: metadata key '{key}' has type {found}, expected {expected}")]
    KeyType {
        key: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("model: {0}")]
    BadHParam(String),
    #[error("model: tensor '{0}' is missing")]
    MissingTensor(String),
    #[error("model: tensor '{name}' has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("model: tensor '{name}' has type {ty}, which molla cannot compute with yet")]
    UnsupportedType { name: String, ty: GgmlType },
}

pub type Result<T> = std::result::Result<T, ModelError>;
