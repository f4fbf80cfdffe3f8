//! phi3: Phi-3, Phi-3.5 and Phi-4 mini. A llama block with NeoX rope whose q/k/v projections
//! come as one fused `attn_qkv` tensor and whose gate and up projections as one `ffn_up` of
//! twice the FFN width (gate first), split into row ranges at load; the 128k models' LongRoPE
//! factors are not supported (their files are refused). llama.cpp ignores the sliding window
//! some phi3 files declare, and so does molla. Every backend runs it (its row ranges are uploaded
//! to CUDA as matrices of their own).

use super::ArchSpec;
use crate::hparams::RopeStyle;

pub const SPEC: ArchSpec = ArchSpec {
    name: "phi3",
    rope_style: RopeStyle::Neox,
    ..ArchSpec::LLAMA
};
