//! qwen2: Qwen2 and Qwen2.5. A llama block with biases on the q/k/v projections and NeoX rope.

use super::ArchSpec;
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "qwen2",
    rope_style: RopeStyle::Neox,
    qkv_bias: true,
    ..ArchSpec::LLAMA
};
