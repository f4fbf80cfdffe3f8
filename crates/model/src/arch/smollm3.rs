//! smollm3: SmolLM3. A llama block (adjacent-pair rope, no biases) whose every fourth layer
//! uses no rope at all ("NoPE"). Every backend runs it (CUDA on its graph path: the persistent
//! kernel ropes every layer alike).

use super::ArchSpec;

pub const SPEC: ArchSpec = ArchSpec {
    name: "smollm3",
    nope_every: 4,
    ..ArchSpec::LLAMA
};
