//! Architectures: each file states how its family differs from a plain llama block, as data.

mod gemma2;
mod gemma3;
mod granite;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;
mod smollm3;

use crate::hparams::RopeStyle;

/// The activation of the gated feed-forward network: `down(act(gate(x)) * up(x))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// SiLU (SwiGLU): llama, qwen2.
    Silu,
    /// GELU, tanh approximation (GeGLU): gemma.
    GeluTanh,
}

/// Layers of sliding-window attention interleaved with global ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwaSpec {
    /// Layer `l` attends globally when `(l + 1) % pattern == 0`, else over the last
    /// `{arch}.attention.sliding_window` positions.
    pub pattern: usize,
    /// Rope frequency base of the sliding-window layers, without scaling (the file's
    /// `rope.freq_base` is the global layers'); None: the global layers' rope.
    pub rope_base: Option<f64>,
    /// The window when the file has no `attention.sliding_window` (None: the key is required).
    pub default_window: Option<usize>,
}

/// Soft-capping `c * tanh(x / c)` of the attention scores and of the final logits, with the
/// caps used when the file has no `attn_logit_softcapping` / `final_logit_softcapping`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softcaps {
    pub attn: f32,
    pub final_logits: f32,
}

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
    /// Per-head RMSNorm of q and k before rope (`blk.N.attn_{q,k}_norm.weight`).
    pub qk_norm: bool,
    /// RMSNorm of the attention and FFN outputs before their residual adds
    /// (`blk.N.post_attention_norm.weight`, `blk.N.post_ffw_norm.weight`).
    pub post_norms: bool,
    pub ffn_act: FfnAct,
    /// Token embeddings multiplied by sqrt(n_embd).
    pub embd_scale: bool,
    pub swa: Option<SwaSpec>,
    pub softcaps: Option<Softcaps>,
    /// Granite's `embedding_scale`, `attention.scale`, `residual_scale` and `logit_scale`.
    pub granite_scales: bool,
    /// Layer `l` applies no rope when `(l + 1) % nope_every == 0` (0: every layer ropes).
    pub nope_every: usize,
    /// Whether the CUDA backend runs this family (else it runs on the CPU or wgpu).
    pub cuda: bool,
    /// Whether the wgpu backend runs this family.
    pub wgpu: bool,
}

impl ArchSpec {
    /// A plain llama block: the defaults each family's spec departs from.
    pub const LLAMA: ArchSpec = ArchSpec {
        name: "llama",
        rope_style: RopeStyle::Normal,
        qkv_bias: false,
        rope_freqs: false,
        qk_norm: false,
        post_norms: false,
        ffn_act: FfnAct::Silu,
        embd_scale: false,
        swa: None,
        softcaps: None,
        granite_scales: false,
        nope_every: 0,
        cuda: true,
        wgpu: true,
    };
}

/// Every supported family.
const ALL: [ArchSpec; 8] = [
    llama::SPEC,
    qwen2::SPEC,
    qwen3::SPEC,
    smollm3::SPEC,
    phi3::SPEC,
    granite::SPEC,
    gemma2::SPEC,
    gemma3::SPEC,
];

/// The spec for a `general.architecture` value, if molla supports it.
pub fn lookup(name: &str) -> Option<ArchSpec> {
    ALL.into_iter().find(|s| s.name == name)
}

/// Every supported `general.architecture` value.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|s| s.name).collect()
}
