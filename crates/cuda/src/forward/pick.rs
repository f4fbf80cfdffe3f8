//! Greedy decoding with the pick made on the device (kernels/pick.cu): a decode step copies back
//! four words instead of the vocabulary's logits (128256 floats a token on Llama 3). It picks
//! what the host sampler picks when greedy without logit bias or penalties.

use super::CudaModel;
use crate::device::Gpu;
use crate::error::{Result, drv};
use crate::kv::CudaKvCache;
use cpu::Logits;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

/// A greedy pick from one position's logits (equal when the same, a bad logit's value compared
/// by its bits, so that a NaN equals itself).
#[derive(Clone, Copy, Debug)]
pub enum Pick {
    /// The highest logit's id (the lowest id among equals).
    Token(u32),
    /// The first logit that is NaN or +infinity: the host sampler refuses those.
    BadLogit { index: usize, value: f32 },
    /// Every logit is -infinity (masked).
    NoCandidates,
}

impl PartialEq for Pick {
    fn eq(&self, other: &Pick) -> bool {
        match (self, other) {
            (Pick::Token(a), Pick::Token(b)) => a == b,
            (Pick::BadLogit { index: i, value: v }, Pick::BadLogit { index: j, value: w }) => {
                i == j && v.to_bits() == w.to_bits()
            }
            (Pick::NoCandidates, Pick::NoCandidates) => true,
            _ => false,
        }
    }
}

/// The first logit that is NaN or +infinity (which the host sampler refuses), and its value.
pub(crate) fn first_bad(logits: &[f32]) -> Option<(usize, f32)> {
    let index = logits
        .iter()
        .position(|&l| l.is_nan() || l == f32::INFINITY)?;
    Some((index, logits[index]))
}

impl Pick {
    /// The pick of `logits` made on the host, by the device's rule.
    pub fn of(logits: &[f32]) -> Pick {
        if let Some((index, value)) = first_bad(logits) {
            return Pick::BadLogit { index, value };
        }
        let mut best: Option<(usize, f32)> = None;
        for (i, &l) in logits.iter().enumerate() {
            if l > f32::NEG_INFINITY && best.is_none_or(|(_, b)| l > b) {
                best = Some((i, l));
            }
        }
        best.map_or(Pick::NoCandidates, |(i, _)| Pick::Token(i as u32))
    }

    /// The kernel's first three words (status, index, value bits), as f32 bit patterns.
    pub(crate) fn from_words(w: &[f32]) -> Pick {
        let word = |i: usize| w.get(i).map_or(2, |v| v.to_bits());
        match word(0) {
            0 => Pick::Token(word(1)),
            1 => Pick::BadLogit {
                index: word(1) as usize,
                value: f32::from_bits(word(2)),
            },
            _ => Pick::NoCandidates,
        }
    }
}

/// What a decode step returns: the logits, the greedy pick (this file), or the top k logits
/// (forward/top.rs), each made on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Reduce {
    #[default]
    Logits,
    Pick,
    Top(usize),
}

/// Words of the pick kernel's result (status, index, value, flag).
pub(crate) const PICK_WORDS: usize = 4;

/// Where a greedy pick made on the device lies (`kv.pick`, by `pick_greedy` or
/// `matvec_wide_pick`), and how many of its words [`Pick::from_words`] reads; the error flag is
/// the word after them.
pub(super) fn pick_result(kv: &CudaKvCache) -> (&CudaSlice<f32>, usize) {
    (&kv.pick, PICK_WORDS - 1)
}

/// Logits one block of the pick kernel reads (kernels/pick.cu `PICK_CHUNK`).
const PICK_CHUNK: usize = 8 * 1024;

/// Words of the pick kernel's buffer for `n` logits: the result, the blocks' ticket, and three
/// words for each block.
pub(crate) fn pick_buffer_words(n: usize) -> usize {
    PICK_WORDS + 1 + 3 * n.div_ceil(PICK_CHUNK)
}

/// `pick_greedy` on the `n` logits at `x` into `out` (the result in its first 4 words); with
/// `flag`, the word after the logits goes to the fourth. The 4 words go to `host` too unless it
/// is 0 (mapped page-locked memory, forward/chain.rs).
///
/// # Safety
/// `x` holds `n` floats (and one more word with `flag`); `out` [`pick_buffer_words`]`(n)` words,
/// its ticket (the fifth) zero, as the kernel leaves it; `host` is 0 or the device address of
/// four words of mapped host memory.
pub(crate) unsafe fn launch_pick(
    gpu: &Gpu,
    x: u64,
    n: usize,
    flag: bool,
    out: &CudaSlice<f32>,
    host: u64,
) -> Result<()> {
    let (n, flag) = (n as i32, i32::from(flag));
    let mut b = gpu.stream.launch_builder(&gpu.k.pick_greedy);
    b.arg(&x).arg(&n).arg(&flag).arg(out).arg(&host);
    crate::launch::count_launch();
    let cfg = LaunchConfig {
        grid_dim: ((n as usize).div_ceil(PICK_CHUNK) as u32, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: as the caller guarantees; the argument layout matches the kernel.
    unsafe { b.launch(cfg) }.map_err(drv("pick launch"))?;
    Ok(())
}

impl CudaModel {
    /// Where a decode step's result is read from, and how many words of it `f` reads: the
    /// `n_vocab` logits, or the words of the pick or top-k kernel (launched here) as `kv.reduce`
    /// says. With `flag`, one more word follows them: the persistent kernel's error flag after
    /// the logits, which the kernels copy after their result.
    ///
    /// # Safety
    /// `kv` is this model's cache, its logits written by the step just launched.
    pub(super) unsafe fn step_result<'a>(
        &self,
        kv: &'a CudaKvCache,
        flag: bool,
    ) -> Result<(&'a CudaSlice<f32>, usize)> {
        let (g, vocab) = (&self.gpu, self.hp.n_vocab);
        let x = g.ptr(&kv.decode.logits);
        // SAFETY: the logits hold n_vocab values and the flag; pick holds the larger of
        // pick_buffer_words(n_vocab) and top_buffer_words(n_vocab), zeroed at allocation, and
        // Reduce::Top's k is one top_k_fits allows.
        match kv.reduce {
            Reduce::Logits => Ok((&kv.decode.logits, vocab)),
            Reduce::Pick => {
                unsafe { launch_pick(g, x, vocab, flag, &kv.pick, 0)? };
                Ok(pick_result(kv))
            }
            Reduce::Top(k) => {
                unsafe { super::top::launch_top(g, x, vocab, k, flag, &kv.pick)? };
                Ok((&kv.pick, super::top::top_words(k)))
            }
        }
    }

    /// [`forward`](Self::forward) of `tokens` with the greedy pick of the last token's logits
    /// instead of the logits: made on the device for a decode step (one token), on the host
    /// from the downloaded logits for a prefill.
    pub fn forward_pick(&self, tokens: &[u32], kv: &mut CudaKvCache) -> Result<Pick> {
        if tokens.len() != 1 {
            return self.forward_with(tokens, kv, Logits::Last, Pick::of);
        }
        kv.reduce = Reduce::Pick;
        let r = self.forward_with(tokens, kv, Logits::Last, Pick::from_words);
        kv.reduce = Reduce::Logits;
        r
    }
}
