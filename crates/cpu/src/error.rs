//! Errors of the CPU forward pass.

/// Why a forward pass could not run. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error(transparent)]
    Quant(#[from] quant::QuantError),
    #[error("forward: no tokens given")]
    NoTokens,
    #[error("forward: token id {id} at position {pos} is outside the vocabulary of {vocab}")]
    BadToken { id: u32, pos: usize, vocab: usize },
    #[error("forward: {needed} positions do not fit the KV cache of {capacity}")]
    ContextFull { needed: usize, capacity: usize },
    #[error("forward: KV cache was made for a different model shape")]
    CacheShape,
    #[error("forward: the KV block pool ({total} blocks) has no free block")]
    KvPoolFull { total: usize },
}

pub type Result<T> = std::result::Result<T, CpuError>;
