//! Helpers the CPU crate's integration tests share.

use cpu::CpuModel;
use gguf::{GgmlType, GgufFile};
use model::Model;
use model::synth::{SynthSpec, build};

/// The tiny synthetic model of `arch` with weights of type `ty`.
pub fn load(arch: &'static str, ty: GgmlType) -> CpuModel {
    let mut spec = SynthSpec::tiny(arch);
    spec.ty = ty;
    let bytes = build(&spec).expect("synthetic model builds");
    CpuModel::new(Model::from_file(GgufFile::from_bytes(bytes).expect("parses")).expect("binds"))
}

/// `n` token ids below 200, different for each `salt`.
pub fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + salt * 11 + 1) % 200)
        .collect()
}
