//! qwen3: Qwen3 (dense). A llama block with NeoX rope and per-head RMSNorm of q and k before
//! rope, no biases; heads usually wider than n_embd / n_head (`attention.key_length`). Every
//! backend runs it (CUDA on its graph path, the q/k norms a launch each).

use super::ArchSpec;
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "qwen3",
    rope_style: RopeStyle::Neox,
    qk_norm: true,
    ..ArchSpec::LLAMA
};
