//! The top k logits of a decode step found on the device (kernels/pick.cu `pick_top`), so that
//! sampling with top-k (llama.cpp's and Ollama's default of 40) copies back k candidates instead
//! of the vocabulary's logits. The host sampler then runs its chain (temperature, top-p, min-p,
//! the draw) on them: it builds exactly that set itself from the full row when top-k is on and
//! nothing changes logits (no bias, no penalties), so the draw is the same.

use super::CudaModel;
use super::pick::Reduce;
use crate::device::Gpu;
use crate::error::{Result, drv};
use crate::kv::CudaKvCache;
use cpu::Logits;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use std::cmp::Ordering;

/// Largest k the device finds (kernels/pick.cu `TOPK_MAX`).
pub const TOPK_MAX: usize = 64;
/// Logits one block sorts (`TOPK_CHUNK`).
const TOPK_CHUNK: usize = 4096;
/// Word of the blocks' ticket, after the result (`TOPK_PART`).
pub(crate) const TOPK_PART: usize = 4 + 2 * TOPK_MAX;

/// Whether the device finds the top `k` of `n_vocab` logits: 1 <= k <= [`TOPK_MAX`], and the
/// blocks' k best fit the last block's sort.
pub fn top_k_fits(n_vocab: usize, k: usize) -> bool {
    (1..=TOPK_MAX).contains(&k) && n_vocab.div_ceil(TOPK_CHUNK) * k <= TOPK_CHUNK
}

/// Words of the kernel's result for `k`, before the flag: status, bad index, bad bits, k pairs.
pub(crate) fn top_words(k: usize) -> usize {
    3 + 2 * k
}

/// Words of the kernel's buffer for `n` logits: the result, the ticket, each block's list.
pub(crate) fn top_buffer_words(n: usize) -> usize {
    TOPK_PART + 1 + n.div_ceil(TOPK_CHUNK) * (1 + 2 * TOPK_MAX)
}

/// The top k logits of one position, or its first bad logit.
#[derive(Clone, Debug)]
pub enum TopLogits {
    /// Up to k (id, logit), higher logit first, lower id among equal logits, -inf left out, -0
    /// given as +0 (as the host sampler's top-k set holds them).
    Top(Vec<(u32, f32)>),
    /// The first logit that is NaN or +infinity.
    BadLogit { index: usize, value: f32 },
}

impl PartialEq for TopLogits {
    /// The same ids and logit bits.
    fn eq(&self, other: &TopLogits) -> bool {
        let bits = |v: &[(u32, f32)]| v.iter().map(|&(i, l)| (i, l.to_bits())).collect::<Vec<_>>();
        match (self, other) {
            (TopLogits::Top(a), TopLogits::Top(b)) => bits(a) == bits(b),
            (
                TopLogits::BadLogit { index: i, value: v },
                TopLogits::BadLogit { index: j, value: w },
            ) => i == j && v.to_bits() == w.to_bits(),
            _ => false,
        }
    }
}

/// Higher logit first, then lower id (no NaN, no -0 here).
fn order(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

impl TopLogits {
    /// The top `k` of `logits` found on the host, by the device's rule.
    pub fn of(logits: &[f32], k: usize) -> TopLogits {
        if let Some((index, value)) = super::pick::first_bad(logits) {
            return TopLogits::BadLogit { index, value };
        }
        let mut v: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|&(_, &l)| l > f32::NEG_INFINITY)
            .map(|(i, &l)| (i as u32, l + 0.0))
            .collect();
        v.sort_unstable_by(order);
        v.truncate(k);
        TopLogits::Top(v)
    }

    /// The kernel's words for `k` (as f32 bit patterns).
    pub(crate) fn from_words(w: &[f32], k: usize) -> TopLogits {
        let word = |i: usize| w.get(i).map_or(0, |v| v.to_bits());
        if word(0) != 0 {
            return TopLogits::BadLogit {
                index: word(1) as usize,
                value: f32::from_bits(word(2)),
            };
        }
        TopLogits::Top(
            (0..k)
                .map(|j| (word(3 + 2 * j), f32::from_bits(word(4 + 2 * j))))
                .filter(|&(_, l)| l > f32::NEG_INFINITY)
                .collect(),
        )
    }
}

/// `pick_top` on the `n` logits at `x` for `k` into `out` (the result in its first
/// [`top_words`]`(k)` words, then the flag); with `flag`, the word after the logits goes there.
///
/// # Safety
/// `x` holds `n` floats (and one more word with `flag`); `out` [`top_buffer_words`]`(n)` words,
/// its ticket zero, as the kernel leaves it; `top_k_fits(n, k)`.
pub(crate) unsafe fn launch_top(
    gpu: &Gpu,
    x: u64,
    n: usize,
    k: usize,
    flag: bool,
    out: &CudaSlice<f32>,
) -> Result<()> {
    let blocks = n.div_ceil(TOPK_CHUNK) as u32;
    let (n, k, flag) = (n as i32, k as i32, i32::from(flag));
    let mut b = gpu.stream.launch_builder(&gpu.k.pick_top);
    b.arg(&x).arg(&n).arg(&k).arg(&flag).arg(out);
    crate::launch::count_launch();
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: as the caller guarantees; the argument layout matches the kernel.
    unsafe { b.launch(cfg) }.map_err(drv("top-k launch"))?;
    Ok(())
}

impl CudaModel {
    /// [`forward`](Self::forward) of `tokens` with the top `k` of the last token's logits
    /// instead of the logits: found on the device for a decode step (one token), on the host
    /// from the downloaded logits for a prefill. An error when `top_k_fits` refuses `k`.
    pub fn forward_top(&self, tokens: &[u32], kv: &mut CudaKvCache, k: usize) -> Result<TopLogits> {
        if !top_k_fits(self.hp.n_vocab, k) {
            return Err(crate::error::CudaError::Unsupported(format!(
                "top-k on the device with k = {k} over {} logits",
                self.hp.n_vocab
            )));
        }
        if tokens.len() != 1 {
            return self.forward_with(tokens, kv, Logits::Last, |l| TopLogits::of(l, k));
        }
        kv.reduce = Reduce::Top(k);
        let r = self.forward_with(tokens, kv, Logits::Last, |w| TopLogits::from_words(w, k));
        kv.reduce = Reduce::Logits;
        r
    }
}
