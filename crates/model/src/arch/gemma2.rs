//! gemma2: Gemma 2. gemma3's block without the q/k norms (NeoX rope, post-norms, GeGLU,
//! embeddings times sqrt(n_embd)), with tanh soft-capping of the attention scores
//! (`attn_logit_softcapping`, 50 by default) and of the final logits
//! (`final_logit_softcapping`, 30), and every other layer over a sliding window
//! (`attention.sliding_window`, 4096 by default) with the global layers' rope. Every backend
//! runs it (CUDA on its graph path).

use super::{ArchSpec, FfnAct, Softcaps, SwaSpec};
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "gemma2",
    rope_style: RopeStyle::Neox,
    post_norms: true,
    ffn_act: FfnAct::GeluTanh,
    embd_scale: true,
    swa: Some(SwaSpec {
        pattern: 2,
        rope_base: None,
        default_window: Some(4096),
    }),
    softcaps: Some(Softcaps {
        attn: 50.0,
        final_logits: 30.0,
    }),
    ..ArchSpec::LLAMA
};
