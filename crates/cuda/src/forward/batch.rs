//! Batched decode: one token for each of several sequences, each with its own cache and
//! position, in one pass of launches (the server's continuous batching). Every matvec runs over
//! all the sequences' rows at once (`matvec_batch`: consecutive blocks take the same weight rows
//! for different sequences, so the weights are read from memory about once a step), and rope,
//! cache store and attention take each row's cache and position from a device table
//! ([`KvRow`]). Each row goes through the same device code as a decode step of that sequence
//! alone, so its logits have the same bits.

use super::CudaModel;
use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use crate::kv::{CudaKvCache, Ptrs, Scratch};
use crate::launch::{self, KvAt, KvRow, Out, Prep};
use cpu::Logits;
use cudarc::driver::CudaSlice;
use model::HParams;

/// Working buffers for up to `n` sequences a step.
pub(crate) struct BatchBufs {
    n: usize,
    s: Scratch,
    tokens: CudaSlice<u32>,
    rows: CudaSlice<KvRow>,
    logits: CudaSlice<f32>,
}

impl BatchBufs {
    fn new(g: &Gpu, hp: &HParams, n: usize) -> Result<BatchBufs> {
        Ok(BatchBufs {
            n,
            s: Scratch::new(g, hp, n)?,
            tokens: g.zeros(n)?,
            rows: g.upload(&vec![KvRow::default(); n])?,
            logits: g.zeros(n * hp.n_vocab)?,
        })
    }
}

impl CudaModel {
    /// One token for each sequence (`seqs[i].0` after what cache `seqs[i].1` holds): `n_vocab`
    /// logits per sequence, in order, each with the bits [`forward`](Self::forward) of that
    /// token alone gives. One sequence runs as a plain decode step (the persistent kernel).
    pub fn forward_batch(&self, seqs: &mut [(u32, &mut CudaKvCache)]) -> Result<Vec<f32>> {
        let n = seqs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if n == 1 {
            let (token, kv) = &mut seqs[0];
            return self.forward(&[*token], kv, Logits::Last);
        }
        let (hp, vocab) = (&self.hp, self.hp.n_vocab);
        for (token, kv) in seqs.iter() {
            if kv.model_uid != self.uid {
                return Err(CudaError::CacheShape);
            }
            cpu::check_input(&[*token], kv.len, kv.capacity(), vocab)?;
        }
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let g = &self.gpu;
        g.ctx.bind_to_thread().map_err(drv("bind context"))?;
        let mut bufs = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        if bufs.as_ref().is_none_or(|b| b.n < n) {
            *bufs = None;
            *bufs = Some(BatchBufs::new(g, hp, n.next_power_of_two().max(8))?);
        }
        let Some(b) = bufs.as_mut() else {
            return Err(CudaError::CacheShape);
        };
        let tokens: Vec<u32> = seqs.iter().map(|(t, _)| *t).collect();
        g.write(&tokens, &mut b.tokens)?;
        let rows: Vec<KvRow> = seqs
            .iter()
            .map(|(_, kv)| KvRow {
                k: g.ptr(&kv.k),
                v: g.ptr(&kv.v),
                k_layer: kv.kv_stride as i64,
                v_layer: kv.v_stride as i64,
                pos: kv.len as i32,
                pad: 0,
            })
            .collect();
        g.write(&rows, &mut b.rows)?;
        // SAFETY: every buffer is sized for `n` rows (b.n >= n), each row's cache has room for
        // its position (checked above), and all addresses belong to this model and its caches.
        unsafe { self.batch_launches(b, n)? };
        let mut out = vec![0.0f32; n * vocab];
        g.download(&b.logits, &mut out)?;
        for (_, kv) in seqs.iter_mut() {
            kv.len += 1;
        }
        Ok(out)
    }

    /// # Safety
    /// As in `forward_batch`: `b` holds `n` tokens and their caches' table.
    unsafe fn batch_launches(&self, b: &BatchBufs, n: usize) -> Result<()> {
        let (g, hp) = (&self.gpu, &self.hp);
        let p = |s: &CudaSlice<f32>| g.ptr(s);
        let Ptrs {
            x,
            q,
            k,
            v,
            att,
            gate,
            up,
            ..
        } = b.s.ptrs(g);
        let (rows, eps) = (g.ptr(&b.rows), hp.rms_eps);
        let out =
            |w: &crate::weights::DevMatrix, y: u64, bias: u64, acc: bool| self.out(w, y, bias, acc);
        // SAFETY (all launches): as the caller guarantees.
        unsafe {
            launch::embed(g, &self.embd.r(g), g.ptr(&b.tokens), n, x)?;
            for (li, l) in self.layers.iter().enumerate() {
                let at = KvAt::Rows { rows, layer: li };
                let qkv = [
                    out(&l.wq, q, self.opt(&l.bq), false),
                    out(&l.wk, k, self.opt(&l.bk), false),
                    out(&l.wv, v, self.opt(&l.bv), false),
                ];
                let norm = Prep::RmsNorm(p(&l.attn_norm), eps);
                launch::matvec_rows(g, &qkv, hp.n_embd, x, norm, n)?;
                self.rope_attend((q, k, v), at, att, n)?;
                let wo = [out(&l.wo, x, 0, true)];
                launch::matvec_rows(g, &wo, hp.n_head * hp.head_dim_v, att, Prep::Plain, n)?;
                let gu = [out(&l.w_gate, gate, 0, false), out(&l.w_up, up, 0, false)];
                let norm = Prep::RmsNorm(p(&l.ffn_norm), eps);
                launch::matvec_rows(g, &gu, hp.n_embd, x, norm, n)?;
                let down = [out(&l.w_down, x, 0, true)];
                launch::matvec_rows(g, &down, hp.n_ff, gate, Prep::SwiGlu(up), n)?;
            }
            let head = [Out {
                w: self.output(),
                y: g.ptr(&b.logits),
                bias: 0,
                accumulate: false,
            }];
            let norm = Prep::RmsNorm(p(&self.output_norm), eps);
            launch::matvec_rows(g, &head, hp.n_embd, x, norm, n)
        }
    }
}
