//! llama: SmolLM2, Llama 2/3.x. Normal (adjacent-pair) rope, no biases; Llama 3.1+ carries
//! llama3 rope scaling as a precomputed `rope_freqs.weight` tensor of frequency divisors.

use super::ArchSpec;

pub const SPEC: ArchSpec = ArchSpec {
    rope_freqs: true,
    ..ArchSpec::LLAMA
};
