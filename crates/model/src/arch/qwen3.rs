//! qwen3: Qwen3 (dense). A llama block with NeoX rope and per-head RMSNorm of q and k before
//! rope, no biases; heads usually wider than n_embd / n_head (`attention.key_length`). The CPU
//! and wgpu backends run it; CUDA's graph path has its q/k norms (a launch each, session 38),
//! not yet run on a GPU, so CUDA declines it.

use super::ArchSpec;
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "qwen3",
    rope_style: RopeStyle::Neox,
    qk_norm: true,
    cuda: false,
    ..ArchSpec::LLAMA
};
