//! The device's launch trace (experiment KTRACE, kernels/ktrace.cuh): each decode kernel's
//! launch stamped on the device, so that a CUDA graph's replay can be timed kernel by kernel.

use crate::device::Gpu;
use crate::error::{Result, drv};

/// One traced launch: the kernel's kind (kernels/ktrace.cuh's numbers, [`kind_name`]), its first
/// block's start, when that block passed `pdl_wait` (its work's start; 0 for a kernel that does
/// not call it) and its last block's end, in ns of the device's global timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub kind: u32,
    pub t0: u64,
    pub tw: u64,
    pub t1: u64,
}

/// The kernel a trace kind names.
pub fn kind_name(kind: u32) -> &'static str {
    match kind {
        1 => "embed",
        2 => "matvec",
        3 => "matvec_fx",
        4 => "matvec_prep_wide",
        5 => "matvec_wide",
        6 => "matvec_wide_norm",
        7 => "rope_attention",
        8 => "attention",
        9 => "rope_store",
        10 => "pick_greedy",
        11 => "matvec_wide_pick",
        _ => "?",
    }
}

/// Whether the kernels were built with the trace (`MOLLA_KDEFS` names KTRACE).
pub fn ktrace_on() -> bool {
    crate::compile::experiment("KTRACE")
}

/// Forgets the launches traced so far (the device's slot counter to 0; a slot's stamps are
/// cleared as a launch takes it). Call it with the stream idle.
pub fn ktrace_reset(gpu: &Gpu) -> Result<()> {
    let mut seq = gpu
        .main_module()
        .get_global("ktrace_seq", &gpu.stream)
        .map_err(drv("ktrace global"))?;
    gpu.stream
        .memset_zeros(&mut seq)
        .map_err(drv("ktrace reset"))?;
    gpu.stream.synchronize().map_err(drv("ktrace reset"))
}

/// The launches traced since [`ktrace_reset`], in order (at most the device's 4096 slots).
pub fn ktrace_read(gpu: &Gpu) -> Result<Vec<Launch>> {
    let m = gpu.main_module();
    let get = |name: &str| -> Result<Vec<u8>> {
        let v = m
            .get_global(name, &gpu.stream)
            .map_err(drv("ktrace global"))?;
        gpu.stream.clone_dtoh(&v).map_err(drv("ktrace read"))
    };
    let seq = le_words(get("ktrace_seq")?, 4)
        .first()
        .copied()
        .unwrap_or(0) as usize;
    let kind = le_words(get("ktrace_kind")?, 4);
    let (t0, tw, t1) = (
        le_words(get("ktrace_t0")?, 8),
        le_words(get("ktrace_tw")?, 8),
        le_words(get("ktrace_t1")?, 8),
    );
    let n = seq.min(kind.len());
    Ok((0..n)
        .map(|i| Launch {
            kind: kind[i] as u32,
            t0: t0[i],
            tw: tw[i],
            t1: t1[i],
        })
        .collect())
}

/// Little-endian words of `n` bytes (at most 8) of a device global's bytes.
fn le_words(b: Vec<u8>, n: usize) -> Vec<u64> {
    b.chunks_exact(n)
        .map(|c| c.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globals_read_as_little_endian_words() {
        assert_eq!(
            le_words(vec![1, 0, 0, 0, 0x78, 0x56, 0x34, 0x12], 4),
            [1, 0x1234_5678]
        );
        assert_eq!(
            le_words(vec![2, 1, 0, 0, 0, 0, 0, 0x80], 8),
            [0x8000_0000_0000_0102]
        );
        assert_eq!(kind_name(5), "matvec_wide");
    }
}
