//! Pieces of a layer shared by decode and prefill: rope, cache store and attention (with each
//! family's variants: layers without rope, per-head q/k norms, sliding windows), how a branch
//! joins the residual stream, and the head's finished logits.

use super::CudaModel;
use crate::error::Result;
use crate::launch::{self, Heads, KvAt, Out};
use crate::weights::DevMatrix;
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

    /// The embedding rows of the `n` token ids at `tokens` into `x`, times the family's
    /// embedding scale (gemma's sqrt(n_embd), granite's).
    ///
    /// # Safety
    /// `tokens` holds `n` device u32s and `x` room for `n` rows.
    pub(super) unsafe fn embed(&self, tokens: u64, n: usize, x: u64) -> Result<()> {
        let g = &self.gpu;
        // SAFETY: as the caller guarantees.
        unsafe {
            launch::embed(g, &self.embd.r(g), tokens, n, x)?;
            match self.hp.embd_scale {
                Some(s) => launch::scale_cap(g, x, s, 0.0, n * self.hp.n_embd),
                None => Ok(()),
            }
        }
    }

    /// The output of a block's attention or FFN projection `w` (post-norm `post`), and how it
    /// joins the residual stream x: accumulated onto x (None), or written to h and then added
    /// by [`join_branch`](Self::join_branch) with the RMSNorm weights to norm it by (0: none;
    /// gemma's post-norms) and the factor to scale it by (granite's residual scale).
    pub(super) fn residual_out(
        &self,
        w: &DevMatrix,
        post: &Option<CudaSlice<f32>>,
        (x, h): (u64, u64),
    ) -> (Out, Option<(u64, f32)>) {
        let scale = self.hp.residual_scale;
        if post.is_none() && scale.is_none() {
            return (self.out(w, x, 0, true), None);
        }
        let branch = (self.opt(post), scale.unwrap_or(1.0));
        (self.out(w, h, 0, false), Some(branch))
    }

    /// Adds the `n` rows of h onto x as `residual_out`'s `branch` says (nothing for None).
    ///
    /// # Safety
    /// x and h hold `n` rows of n_embd values.
    pub(super) unsafe fn join_branch(
        &self,
        (x, h): (u64, u64),
        branch: Option<(u64, f32)>,
        n: usize,
    ) -> Result<()> {
        let Some((norm, scale)) = branch else {
            return Ok(());
        };
        let (eps, e) = (self.hp.rms_eps, self.hp.n_embd);
        // SAFETY: as the caller guarantees.
        unsafe { launch::add_branch(&self.gpu, x, h, norm, (n, e), eps, scale) }
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
        unsafe { launch::scale_cap(&self.gpu, logits, mul, cap, rows * hp.n_vocab) }
    }
}
