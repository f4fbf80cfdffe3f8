//! Prefill of many tokens on the CUDA device: matmuls (through cuBLAS from `cublas_min_rows`
//! rows up, the engine's tiled kernel below), then the logits asked for.

use super::{CudaModel, cublas_min_rows};
use crate::blas::{Blas, BlasState};
use crate::error::Result;
use crate::kv::{CHUNK, CudaKvCache, Ptrs, Scratch};
use crate::launch::{self, KvAt, Out, Prep};
use crate::weights::DevMatrix;
use cpu::Logits;
use cudarc::driver::CudaSlice;

impl CudaModel {
    /// Runs `tokens` through the model into `kv` and appends the logits `want` asks for (the
    /// last token's, or every token's) to `out`.
    pub(super) fn prefill(
        &self,
        tokens: &[u32],
        kv: &mut CudaKvCache,
        want: Option<Logits>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let (g, hp) = (&self.gpu, &self.hp);
        let n = tokens.len();
        if kv.prefill.as_ref().is_none_or(|s| s.n < n) {
            kv.prefill = None;
            kv.prefill = Some(Scratch::new(g, hp, n.next_power_of_two().clamp(16, CHUNK))?);
        }
        if want == Some(Logits::All)
            && kv
                .logits_all
                .as_ref()
                .is_none_or(|b| b.len() < n * hp.n_vocab)
        {
            kv.logits_all = None;
            kv.logits_all = Some(g.zeros(CHUNK.min(n.next_power_of_two()) * hp.n_vocab)?);
        }
        g.write(tokens, &mut kv.tokens)?;
        g.write(&[kv.len as i32], &mut kv.pos)?;
        let Some(s) = kv.prefill.as_ref() else {
            return Ok(());
        };
        let p = |b: &CudaSlice<f32>| g.ptr(b);
        let Ptrs {
            x,
            h,
            q,
            k,
            v,
            att,
            gate,
            up,
            logits,
        } = s.ptrs(g);
        let (pos, e) = (g.ptr(&kv.pos), hp.n_embd);
        let mut blas = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        if n >= cublas_min_rows() && matches!(*blas, BlasState::Untried) {
            *blas = match Blas::new(g, self.max_weights(), CHUNK * self.max_cols()) {
                Ok(Some(b)) => BlasState::Ready(Box::new(b)),
                _ => BlasState::Absent,
            };
        }
        let out_ =
            |w: &DevMatrix, y: u64, bias: u64, accumulate: bool| self.out(w, y, bias, accumulate);
        // SAFETY (all launches): the scratch holds at least `n` tokens, the cache has room for
        // positions kv.len..kv.len+n (checked by `forward`), and every buffer belongs to this model.
        unsafe {
            self.embed(g.ptr(&kv.tokens), n, x)?;
            for (li, l) in self.layers.iter().enumerate() {
                let cache = self.cache_ptrs(kv, li);
                launch::rms_norm(g, x, p(&l.attn_norm), h, n, e, hp.rms_eps)?;
                self.matmul(&mut blas, &out_(&l.wq, q, self.opt(&l.bq), false), h, n)?;
                self.matmul(&mut blas, &out_(&l.wk, k, self.opt(&l.bk), false), h, n)?;
                self.matmul(&mut blas, &out_(&l.wv, v, self.opt(&l.bv), false), h, n)?;
                let at = KvAt::One {
                    cache,
                    pos,
                    f32: kv.f32,
                    split: kv.split(g),
                };
                self.rope_attend(li, (q, k, v), at, att, n, None)?;
                // A branch normed or scaled before its add (gemma, granite) goes through h.
                let (wo, branch) = self.residual_out(&l.wo, &l.post_attn_norm, (x, h));
                self.matmul(&mut blas, &wo, att, n)?;
                self.join_branch((x, h), branch, n)?;
                launch::rms_norm(g, x, p(&l.ffn_norm), h, n, e, hp.rms_eps)?;
                self.matmul(&mut blas, &out_(&l.w_gate, gate, 0, false), h, n)?;
                self.matmul(&mut blas, &out_(&l.w_up, up, 0, false), h, n)?;
                launch::glu(g, hp.ffn_act, gate, up, n * hp.n_ff)?;
                let (down, branch) = self.residual_out(&l.w_down, &l.post_ffn_norm, (x, h));
                self.matmul(&mut blas, &down, gate, n)?;
                self.join_branch((x, h), branch, n)?;
            }
            let norm = p(&self.output_norm);
            match want {
                Some(Logits::Last) => {
                    let head = Out {
                        w: self.output(),
                        y: logits,
                        bias: 0,
                        accumulate: false,
                        fixed: false,
                    };
                    let last = x + ((n - 1) * e * 4) as u64;
                    launch::matvec(g, &[head], e, last, Prep::RmsNorm(norm, hp.rms_eps))?;
                    self.finish_logits(logits, 1)?;
                }
                Some(Logits::All) => {
                    if let Some(all) = &kv.logits_all {
                        launch::rms_norm(g, x, norm, h, n, e, hp.rms_eps)?;
                        let head = Out {
                            w: self.output(),
                            y: g.ptr(all),
                            bias: 0,
                            accumulate: false,
                            fixed: false,
                        };
                        self.matmul(&mut blas, &head, h, n)?;
                        self.finish_logits(g.ptr(all), n)?;
                    }
                }
                None => {}
            }
        }
        match want {
            Some(Logits::Last) => {
                let mut l = vec![0.0f32; hp.n_vocab];
                g.download(&s.logits, &mut l)?;
                out.extend_from_slice(&l);
            }
            Some(Logits::All) => {
                let mut l = vec![0.0f32; n * hp.n_vocab];
                if let Some(all) = &kv.logits_all {
                    g.download(all, &mut l)?;
                }
                out.extend_from_slice(&l);
            }
            None => g.sync()?,
        }
        kv.len += n;
        Ok(())
    }
}
