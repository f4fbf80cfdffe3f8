//! Pieces of a layer shared by decode and prefill: rope, cache store and attention (with each
//! family's variants: layers without rope, per-head q/k norms, sliding windows), how a branch
//! joins the residual stream, and the head's finished logits.

use super::CudaModel;
use crate::error::Result;
use crate::launch::{self, Heads, KvAt};
use cudarc::driver::CudaSlice;

impl CudaModel {
    /// Rope of q and k, the store of k and v into the cache(s), then attention into `att`, for
    /// `n` tokens. With `prep` (`matvec_wide`'s buffer for wo), one-token decode through
    /// `rope_attention` also quantizes `att` into it: returns whether it did.
    ///
    /// # Safety
    /// As `launch::rope_store` and `launch::attention`: q/k/v/att hold `n` rows, `at` has room;
    /// `prep` as `launch::rope_attention` takes it.
    pub(super) unsafe fn rope_attend(
        &self,
        li: usize,
        qkv: (u64, u64, u64),
        at: KvAt,
        att: u64,
        n: usize,
        prep: Option<u64>,
    ) -> Result<bool> {
        let g = &self.gpu;
        if let Some((qn, kn)) = &self.layers[li].qk_norm {
            // qwen3: each head of q and k RMS-normed before rope (a launch each).
            let (hd, eps) = (self.heads.head_dim, self.hp.rms_eps);
            let nq = self.heads.n_head * n;
            // SAFETY: q and k hold n rows of n_head (n_head_kv) heads of hd values.
            unsafe {
                launch::rms_norm_inplace(g, qkv.0, g.ptr(qn), nq, hd, eps)?;
                launch::rms_norm_inplace(g, qkv.1, g.ptr(kn), self.heads.n_head_kv * n, hd, eps)?;
            }
        }
        // A layer without rope (SmolLM3's every fourth): no pair rotates (kernels/rope.cu
        // rope_idx with n_rot 0), the keys are stored as they are. A sliding-window layer
        // (gemma) sees its last `window` positions, roped with its own table.
        let window = self.hp.window(li).unwrap_or(0);
        let heads = Heads {
            n_rot: if self.hp.ropes(li) {
                self.heads.n_rot
            } else {
                0
            },
            window,
            ..self.heads
        };
        let fr = match &self.freqs_swa {
            Some(f) if window > 0 => g.ptr(f),
            _ => g.ptr(&self.freqs),
        };
        if n == 1 && matches!(at, KvAt::One { f32: false, .. }) && launch::rope_attention_on() {
            // SAFETY: as the caller guarantees; one token, f16 caches.
            unsafe { launch::rope_attention(g, &heads, qkv, at, fr, att, prep.unwrap_or(0)) }?;
            return Ok(prep.is_some());
        }
        // SAFETY: as the caller guarantees.
        unsafe {
            launch::rope_store(g, &heads, qkv, at, fr, n)?;
            launch::attention(g, &heads, qkv.0, at, att, n)?;
        }
        Ok(false)
    }

    /// How a block's attention or FFN output joins the residual stream: None when it is added
    /// as it is (its matvec accumulates onto x), else the RMSNorm weights to norm it by (0:
    /// none; gemma's post-norms) and the factor to scale it by (granite's residual scale), for
    /// `launch::add_branch`.
    pub(super) fn branch(&self, post: &Option<CudaSlice<f32>>) -> Option<(u64, f32)> {
        let scale = self.hp.residual_scale;
        (post.is_some() || scale.is_some()).then(|| (self.opt(post), scale.unwrap_or(1.0)))
    }

    /// The head's `rows` rows of logits at `logits` scaled and soft-capped where the family
    /// does so (granite's logit scale, gemma2's final soft-cap), as the CPU's `finish_logits`.
    ///
    /// # Safety
    /// `logits` holds `rows` rows of the vocabulary.
    pub(super) unsafe fn finish_logits(&self, logits: u64, rows: usize) -> Result<()> {
        let hp = &self.hp;
        if hp.logit_mul.is_none() && hp.final_softcap.is_none() {
            return Ok(());
        }
        let (mul, cap) = (hp.logit_mul.unwrap_or(1.0), hp.final_softcap.unwrap_or(0.0));
        // SAFETY: as the caller guarantees.
        unsafe { launch::finish_logits(&self.gpu, logits, mul, cap, rows * hp.n_vocab) }
    }
}
