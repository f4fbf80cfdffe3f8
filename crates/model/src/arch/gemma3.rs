//! gemma3: Gemma 3 (text). A llama block with NeoX rope, per-head RMSNorm of q and k, RMSNorm
//! of the attention and FFN outputs before each residual add, GeGLU (tanh GELU), embeddings
//! scaled by sqrt(n_embd), and five sliding-window layers (rope base 10000) to each global one
//! (the file's rope base). The converter stores the norms' weights with Gemma's +1 folded in,
//! so they are plain RMSNorm weights here. Every backend runs it (CUDA on its graph path).

use super::{ArchSpec, FfnAct, SwaSpec};
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "gemma3",
    rope_style: RopeStyle::Neox,
    qk_norm: true,
    post_norms: true,
    ffn_act: FfnAct::GeluTanh,
    embd_scale: true,
    swa: Some(SwaSpec {
        pattern: 6,
        rope_base: Some(10000.0),
        default_window: None,
    }),
    ..ArchSpec::LLAMA
};
