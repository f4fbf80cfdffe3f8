//! granite: IBM Granite 3.x (dense). A llama block with four scalars from the file: embeddings
//! times `embedding_scale`, attention scores times `attention.scale` (in place of
//! 1/sqrt(head_dim)), each block's attention and FFN outputs times `residual_scale` before their
//! residual adds, and the logits divided by `logit_scale`. Every backend runs it (CUDA on its
//! graph path).

use super::ArchSpec;

pub const SPEC: ArchSpec = ArchSpec {
    name: "granite",
    granite_scales: true,
    ..ArchSpec::LLAMA
};
