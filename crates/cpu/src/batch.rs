//! Batched decode: one next token for each of several sequences (each with its own KV cache) in
//! one pass over the weights, for a server's continuous batching.
//!
//! Every weight chunk is read once and multiplied with every sequence's activations while it is
//! hot in cache. Each row's arithmetic is exactly that of single-token decode
//! ([`CpuModel::forward`] with one token): the same q16 (or f32) kernels on the same per-row
//! quantized activations, over the same 8-row-aligned groups of weight rows, the same attention
//! over the sequence's own cache. So a sequence's logits do not depend on which other sequences
//! share its step: batched greedy decoding gives what it gives alone, bit for bit.

use crate::attention::attention;
use crate::block::{Acts, block};
use crate::error::{CpuError, Result};
use crate::forward::{CpuModel, check_input};
use crate::kv::KvCache;
use crate::ops::rms_norm;
use crate::pool::{Chunks, Pool};
use gguf::GgufFile;
use model::Matrix;
use quant::q16::{self, Q16Acts};
use std::sync::Mutex;

/// Weight rows per task: a multiple of 8 (the decode kernels' row groups), small enough that
/// the chunk stays in L1/L2 while every sequence's activations pass over it.
const ROWS_PER_TASK: usize = 32;

impl CpuModel {
    /// Runs one token per sequence: `seqs[i].0` at position `seqs[i].1.len` of cache `seqs[i].1`,
    /// appending its key and value there. Returns `n_vocab` logits per sequence, in order.
    pub fn forward_batch(&self, seqs: &mut [(u32, &mut KvCache)]) -> Result<Vec<f32>> {
        let tokens: Vec<[u32; 1]> = seqs.iter().map(|(t, _)| [*t]).collect();
        let mut entries: Vec<(&[u32], &mut KvCache)> = tokens
            .iter()
            .zip(seqs.iter_mut())
            .map(|(t, (_, kv))| (&t[..], &mut **kv))
            .collect();
        self.forward_mixed(&mut entries)
    }

    /// Runs several tokens for each of several sequences in one pass over the weights
    /// (`seqs[i].0` after what cache `seqs[i].1` holds: a decode token, or a chunk of a prompt),
    /// appending their keys and values. Returns `n_vocab` logits of each sequence's last token,
    /// in order. Every token is a row with the arithmetic of a single-token decode step at its
    /// position (a sequence's rows are stored and attend in order, so they see each other
    /// causally): a sequence's logits do not depend on what shares the pass.
    pub fn forward_mixed(&self, seqs: &mut [(&[u32], &mut KvCache)]) -> Result<Vec<f32>> {
        let m = &self.model;
        let hp = &m.hp;
        let f = &m.file;
        let n: usize = seqs.iter().map(|(t, _)| t.len()).sum();
        if seqs.is_empty() || seqs.iter().any(|(t, _)| t.is_empty()) {
            return Err(CpuError::NoTokens);
        }
        for (toks, kv) in seqs.iter() {
            if !kv.fits(hp) {
                return Err(CpuError::CacheShape);
            }
            check_input(toks, kv.len, kv.capacity(), hp.n_vocab)?;
        }
        for (toks, kv) in seqs.iter_mut() {
            let end = kv.len + toks.len();
            kv.grow(end)?;
        }
        let e = hp.n_embd;
        let mut x = vec![0.0f32; n * e];
        // Row t: sequence owner[t], position pos[t].
        let mut owner = Vec::with_capacity(n);
        let mut pos = Vec::with_capacity(n);
        for (i, (toks, kv)) in seqs.iter().enumerate() {
            for (j, &tok) in toks.iter().enumerate() {
                let t = owner.len();
                self.embed(tok, &mut x[t * e..(t + 1) * e])?;
                owner.push(i);
                pos.push(kv.len + j);
            }
        }
        let (qd, kd, vd) = (hp.q_dim(), hp.kv_dim(), hp.v_dim());
        let ad = hp.n_head * hp.head_dim_v;
        let mut a = Acts::new(hp, n);
        for (li, l) in m.layers.iter().enumerate() {
            block(&self.pool, f, hp, l, &mut x, &mut a, n, matvec_rows, |a| {
                for t in 0..n {
                    let (kv, pos) = (&mut *seqs[owner[t]].1, pos[t]);
                    let qt = &mut a.q[t * qd..(t + 1) * qd];
                    let kt = &mut a.k[t * kd..(t + 1) * kd];
                    if let Some(rope) = self.rope_of(li) {
                        rope.apply(qt, hp.head_dim, pos);
                        rope.apply(kt, hp.head_dim, pos);
                    }
                    kv.store(li, pos, kt, &a.v[t * vd..(t + 1) * vd]);
                    attention(
                        &self.pool,
                        hp,
                        qt,
                        kv.keys(li, pos + 1),
                        kv.values(li, pos + 1),
                        pos,
                        hp.window(li),
                        &mut a.att[t * ad..(t + 1) * ad],
                    );
                }
            })?;
        }
        // The head on each sequence's last row only.
        let ns = seqs.len();
        let mut last = vec![0.0f32; ns * e];
        let mut t = 0;
        for (i, (toks, kv)) in seqs.iter_mut().enumerate() {
            t += toks.len();
            last[i * e..(i + 1) * e].copy_from_slice(&x[(t - 1) * e..t * e]);
            kv.len += toks.len();
        }
        let mut normed = vec![0.0f32; ns * e];
        rms_norm(&last, &m.output_norm, hp.rms_eps, &mut normed);
        let mut logits = vec![0.0f32; ns * hp.n_vocab];
        matvec_rows(&self.pool, f, &[&m.output], &normed, ns, &mut [&mut logits])?;
        crate::ops::finish_logits(&mut logits, hp);
        Ok(logits)
    }
}

/// `ys[i]` (n rows of `ws[i].rows`) = the n rows of `x` times `ws[i]`ᵀ, each row through the
/// single-row decode kernels. Tasks are 8-row-aligned chunks of weight rows; each multiplies its
/// chunk with all n rows before moving on.
fn matvec_rows(
    pool: &Pool,
    file: &GgufFile,
    ws: &[&Matrix],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
) -> Result<()> {
    let cols = ws[0].cols;
    let acts: Vec<Q16Acts> = if ws.iter().any(|w| q16::supports_q16(w.ty)) {
        x.chunks_exact(cols)
            .map(|r| {
                let mut a = Q16Acts::new();
                a.quantize(r).map(|()| a)
            })
            .collect::<std::result::Result<_, _>>()?
    } else {
        Vec::new()
    };
    // (matrix, first row, rows): every matrix split at multiples of ROWS_PER_TASK
    let tasks: Vec<(usize, usize, usize)> = ws
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            (0..w.rows)
                .step_by(ROWS_PER_TASK)
                .map(move |r| (i, r, ROWS_PER_TASK.min(w.rows - r)))
        })
        .collect();
    let outs: Vec<Mutex<Vec<f32>>> = tasks.iter().map(|_| Mutex::new(Vec::new())).collect();
    let next = Chunks::new(tasks.len(), 1);
    let failure: Mutex<Option<CpuError>> = Mutex::new(None);
    pool.run(&|_| {
        while let Some(r) = next.claim() {
            let (i, first, rows) = tasks[r.start];
            let w = ws[i];
            let bytes = w.rows_bytes(file, first, rows);
            // Each task is claimed by exactly one thread, so its lock is never contended.
            let mut out = outs[r.start].lock().unwrap_or_else(|e| e.into_inner());
            out.resize(n * rows, 0.0);
            for (t, y) in out.chunks_exact_mut(rows).enumerate() {
                let done = if q16::supports_q16(w.ty) {
                    q16::matvec_q16(w.ty, bytes, w.row_bytes, &acts[t], y)
                } else {
                    q16::matvec_f32(w.ty, bytes, w.row_bytes, &x[t * cols..(t + 1) * cols], y)
                };
                if let Err(e) = done {
                    *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.into());
                }
            }
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    for ((i, first, rows), out) in tasks.into_iter().zip(outs) {
        let out = out.into_inner().unwrap_or_else(|e| e.into_inner());
        let wr = ws[i].rows;
        for (t, src) in out.chunks_exact(rows).enumerate() {
            ys[i][t * wr + first..][..rows].copy_from_slice(src);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{CpuModel, Logits};

    /// Sequences at different positions, batched, give each one's single-token logits exactly.
    #[test]
    fn batched_decode_is_bit_identical_to_single_decode() {
        let bytes = model::synth::chat_model(None).unwrap();
        let file = gguf::GgufFile::from_bytes(bytes).unwrap();
        let m = CpuModel::with_threads(model::Model::from_file(file).unwrap(), 2);
        let prompts: [&[u32]; 3] = [&[1, 2, 3], &[7], &[9, 8, 7, 6, 5]];
        let mut solo = Vec::new();
        let mut caches = Vec::new();
        for p in prompts {
            let mut c = m.new_cache(32);
            m.forward(p, &mut c, Logits::Last).unwrap();
            let mut c2 = m.new_cache(32);
            m.forward(p, &mut c2, Logits::Last).unwrap();
            solo.push(m.forward(&[42], &mut c2, Logits::Last).unwrap());
            caches.push(c);
        }
        let mut seqs: Vec<(u32, &mut crate::KvCache)> =
            caches.iter_mut().map(|c| (42, c)).collect();
        let batched = m.forward_batch(&mut seqs).unwrap();
        let nv = m.model.hp.n_vocab;
        for (i, s) in solo.iter().enumerate() {
            assert_eq!(&batched[i * nv..(i + 1) * nv], &s[..], "sequence {i}");
        }
        assert!(
            caches
                .iter()
                .zip(prompts)
                .all(|(c, p)| c.len == p.len() + 1)
        );
    }
}

/// Timing of batched decode on the real SmolLM2 (ignored: run with `--ignored --nocapture`).
#[cfg(test)]
mod timing {
    use crate::{CpuModel, Logits};
    use std::time::Instant;

    #[test]
    #[ignore]
    fn batched_decode_timing() {
        let home = std::env::var("HOME").unwrap_or_default();
        let dir = std::env::var("MOLLA_MODELS").unwrap_or(format!("{home}/.cache/molla/models"));
        let path = format!("{dir}/SmolLM2-135M-Instruct.Q4_1.gguf");
        let m = CpuModel::new(model::Model::open(std::path::Path::new(&path)).unwrap());
        for n in [1usize, 4, 16] {
            let mut caches: Vec<_> = (0..n).map(|_| m.new_cache(512)).collect();
            for c in &mut caches {
                m.forward(&[1, 2, 3, 4, 5, 6, 7, 8], c, Logits::Last)
                    .unwrap();
            }
            let steps = 20;
            let t = Instant::now();
            for _ in 0..steps {
                let mut seqs: Vec<_> = caches.iter_mut().map(|c| (42u32, c)).collect();
                m.forward_batch(&mut seqs).unwrap();
            }
            let dt = t.elapsed().as_secs_f64() / steps as f64;
            println!(
                "batch {n:2}: {:.2} ms/step, {:.0} tok/s",
                dt * 1e3,
                n as f64 / dt
            );
        }
    }
}
