//! Architectures: each file states how its family differs from a plain llama block, as data.

mod llama;
mod qwen2;

use crate::hparams::RopeStyle;

/// What distinguishes one decoder family from another.
#[derive(Clone, Copy, Debug)]
pub struct ArchSpec {
    /// `general.architecture` value and metadata key prefix.
    pub name: &'static str,
    pub rope_style: RopeStyle,
    /// Whether q/k/v projections carry biases (`blk.N.attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
    /// Whether a `rope_freqs.weight` tensor (llama3 rope scaling) may be present.
    pub rope_freqs: bool,
}

/// The spec for a `general.architecture` value, if molla supports it.
pub fn lookup(name: &str) -> Option<ArchSpec> {
    [llama::SPEC, qwen2::SPEC]
        .into_iter()
        .find(|s| s.name == name)
}
