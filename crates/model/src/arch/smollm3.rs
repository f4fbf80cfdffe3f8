//! smollm3: SmolLM3. A llama block (adjacent-pair rope, no biases) whose every fourth layer
//! uses no rope at all ("NoPE"). The CPU and wgpu backends run it; CUDA's graph path ropes such
//! layers with n_rot 0 (session 38), not yet run on a GPU, so CUDA declines it.

use super::ArchSpec;

pub const SPEC: ArchSpec = ArchSpec {
    name: "smollm3",
    nope_every: 4,
    cuda: false,
    ..ArchSpec::LLAMA
};
