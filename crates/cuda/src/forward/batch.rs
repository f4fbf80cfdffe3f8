//! Batched decode: one token for each of several sequences, each with its own cache and
//! position, in one pass of launches (the server's continuous batching). Every matvec runs over
//! all the sequences' rows at once (`matvec_prep` prepares each input once, then a
//! `matvec_multi` block reads each of its weight rows once for up to 8 of them), and rope,
//! cache store and attention take each row's cache and position from a device table
//! ([`KvRow`]). Each row goes through the same device code as a decode step of that sequence
//! alone, so its logits have the same bits.
//!
//! The ~300 launches of a step depend only on the batch size (tokens, caches and positions are
//! read from device tables written before the launch), so each size's launches are captured
//! once into a CUDA graph and replayed: a step costs one launch from the host, as decode alone.

use super::CudaModel;
use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use crate::kv::{CudaKvCache, Graph, Scratch};
use crate::launch::{KvAt, KvRow, Rows, prep_stride};
use cpu::Logits;
use cudarc::driver::CudaSlice;
use model::HParams;
use std::sync::atomic::Ordering;

/// Working buffers for up to `n` rows (tokens) a step, with logits for up to `nl` of them.
pub(crate) struct BatchBufs {
    n: usize,
    nl: usize,
    s: Scratch,
    tokens: CudaSlice<u32>,
    rows: CudaSlice<KvRow>,
    logits: CudaSlice<f32>,
    /// Rows whose logits a mixed step wants (each sequence's last).
    sel: CudaSlice<i32>,
    /// Each matvec's inputs, prepared once (launch::Rows).
    prep: CudaSlice<u8>,
    /// The captured step for each batch size (index n), made on first use.
    graphs: Vec<Option<Graph>>,
}

impl BatchBufs {
    fn new(g: &Gpu, hp: &HParams, n: usize, nl: usize, max_cols: usize) -> Result<BatchBufs> {
        Ok(BatchBufs {
            nl,
            prep: g.zeros(n * prep_stride(max_cols))?,
            n,
            s: Scratch::new(g, hp, n)?,
            tokens: g.zeros(n)?,
            rows: g.upload(&vec![KvRow::default(); n])?,
            logits: g.zeros(nl * hp.n_vocab)?,
            sel: g.zeros(n)?,
            graphs: (0..=n).map(|_| None).collect(),
        })
    }
}

impl CudaModel {
    /// One token for each sequence (`seqs[i].0` after what cache `seqs[i].1` holds): `n_vocab`
    /// logits per sequence, in order, each with the bits [`forward`](Self::forward) of that
    /// token alone gives. One sequence runs as a plain decode step (the persistent kernel).
    pub fn forward_batch(&self, seqs: &mut [(u32, &mut CudaKvCache)]) -> Result<Vec<f32>> {
        self.forward_batch_with(seqs, <[f32]>::to_vec)
    }

    /// [`forward_batch`](Self::forward_batch) with every sequence's logits (`n_vocab` each, in
    /// order) read by `f` where they land: the pinned staging buffer the one copy from the
    /// device went to (12 MB a step at 64 SmolLM2 sequences, no second copy).
    pub fn forward_batch_with<R>(
        &self,
        seqs: &mut [(u32, &mut CudaKvCache)],
        f: impl FnOnce(&[f32]) -> R,
    ) -> Result<R> {
        if let [(token, kv)] = seqs {
            return self.forward_with(&[*token], kv, Logits::Last, f);
        }
        let tokens: Vec<[u32; 1]> = seqs.iter().map(|(t, _)| [*t]).collect();
        let mut entries: Vec<(&[u32], &mut CudaKvCache)> = tokens
            .iter()
            .zip(seqs.iter_mut())
            .map(|(t, (_, kv))| (&t[..], &mut **kv))
            .collect();
        self.forward_mixed_with(&mut entries, f)
    }

    /// Several tokens for each of several sequences in one pass of launches (`seqs[i].0` after
    /// what cache `seqs[i].1` holds: a decode token, or a chunk of a prompt): `n_vocab` logits of
    /// each sequence's last token, in order, read by `f` where they land. Every token is a row of
    /// the batched decode step (its cache, its position; rows of one sequence see each other
    /// causally, as its keys and values are stored before any row attends), so each gets the
    /// bits a decode step of that token alone gives, whatever else shares the pass: a prompt
    /// chunk prefilled here differs from [`forward`](Self::forward)'s prefill (matmuls) within
    /// rounding, the same way every time.
    pub fn forward_mixed_with<R>(
        &self,
        seqs: &mut [(&[u32], &mut CudaKvCache)],
        f: impl FnOnce(&[f32]) -> R,
    ) -> Result<R> {
        let rows_total: usize = seqs.iter().map(|(t, _)| t.len()).sum();
        let n_seq = seqs.len();
        if n_seq == 0 {
            return Ok(f(&[]));
        }
        let (hp, vocab) = (&self.hp, self.hp.n_vocab);
        for (tokens, kv) in seqs.iter() {
            if kv.model_uid != self.uid {
                return Err(CudaError::CacheShape);
            }
            if kv.f32 {
                return Err(CudaError::Unsupported(
                    "batched steps over f32 KV caches (they take f16 caches)".into(),
                ));
            }
            cpu::check_input(tokens, kv.len, kv.capacity(), vocab)?;
        }
        let decode_only = rows_total == n_seq;
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let g = &self.gpu;
        g.ctx.bind_to_thread().map_err(drv("bind context"))?;
        let mut bufs = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        // Rows, and rows of logits (a prompt chunk's rows need none but its last's). Growing
        // keeps the other size (no back and forth between mixed and decode steps) and frees
        // the smaller buffers first.
        let (mut n, mut nl) = (
            rows_total.next_power_of_two().max(8),
            n_seq.next_power_of_two().max(8),
        );
        if let Some(b) = bufs.as_ref()
            && (b.n < rows_total || b.nl < n_seq)
        {
            (n, nl) = (n.max(b.n), nl.max(b.nl));
            *bufs = None;
        }
        let b = match &mut *bufs {
            Some(b) => b,
            none => none.insert(BatchBufs::new(g, hp, n, nl, self.max_cols())?),
        };
        let tokens: Vec<u32> = seqs.iter().flat_map(|(t, _)| t.iter().copied()).collect();
        g.write(&tokens, &mut b.tokens)?;
        let mut rows = Vec::with_capacity(rows_total);
        let mut last = Vec::with_capacity(n_seq);
        for (t, kv) in seqs.iter() {
            for j in 0..t.len() {
                rows.push(KvRow {
                    k: g.ptr(&kv.k),
                    v: g.ptr(&kv.v),
                    k_layer: kv.kv_stride as i64,
                    v_layer: kv.v_stride as i64,
                    pos: (kv.len + j) as i32,
                    pad: 0,
                });
            }
            last.push(rows.len() as i32 - 1);
        }
        g.write(&rows, &mut b.rows)?;
        if decode_only {
            self.batch_step(b, rows_total)?;
        } else {
            g.write(&last, &mut b.sel)?;
            // SAFETY: as in `batch_launches`; the tables were written above, and the wanted
            // rows (each sequence's last) are below rows_total.
            unsafe { self.batch_launches(b, rows_total, Some((g.ptr(&b.sel), n_seq)))? };
        }
        let r = g.download_with(&b.logits, n_seq * vocab, f)?;
        for (t, kv) in seqs.iter_mut() {
            kv.len += t.len();
        }
        Ok(r)
    }

    /// A step of `n` one-token rows (every row's logits): the size's captured graph, captured
    /// on first use, or plain launches when graphs are off.
    fn batch_step(&self, b: &mut BatchBufs, n: usize) -> Result<()> {
        if self.graphs.load(Ordering::Relaxed) && b.graphs[n].is_none() {
            match self.capture_batch(b, n) {
                Ok(graph) => b.graphs[n] = Some(graph),
                // Capture unsupported here: plain launches from now on (decode alone too).
                Err(_) => self.graphs.store(false, Ordering::Relaxed),
            }
        }
        match b.graphs[n]
            .as_ref()
            .filter(|_| self.graphs.load(Ordering::Relaxed))
        {
            Some(graph) => {
                crate::launch::count_launch();
                graph.exec.launch().map_err(drv("graph launch"))
            }
            // SAFETY: the caller wrote the tables for n rows of live caches with room.
            None => unsafe { self.batch_launches(b, n, None) },
        }
    }
}

impl CudaModel {
    /// The launches of a step over the first `n` rows of `b`'s tables (logits of the rows
    /// `head` names, or of all).
    ///
    /// # Safety
    /// `n <= b.n`, and `b.rows` names `n` live caches of this model, each with room for its
    /// position (the callers check that before writing the table).
    unsafe fn batch_launches(
        &self,
        b: &BatchBufs,
        n: usize,
        head: Option<(u64, usize)>,
    ) -> Result<()> {
        let g = &self.gpu;
        let rows = g.ptr(&b.rows);
        let at = |layer| KvAt::Rows { rows, layer };
        let batch = Rows {
            n,
            prep: g.ptr(&b.prep),
        };
        // SAFETY: every buffer is sized for `n` rows (b.n >= n; prep for the widest input), and
        // the table's caches are as the caller guarantees.
        unsafe { self.step_launches(&b.s, g.ptr(&b.tokens), at, g.ptr(&b.logits), batch, head) }
    }

    /// Captures [`batch_launches`](Self::batch_launches) for `n` rows into a graph: it reads
    /// the tokens and the cache table from `b`'s device buffers, so it serves every step of
    /// that size.
    fn capture_batch(&self, b: &BatchBufs, n: usize) -> Result<Graph> {
        // SAFETY: captured, not run; when replayed, as in `forward_mixed_with`.
        self.capture_with(|| unsafe { self.batch_launches(b, n, None) })
    }
}
