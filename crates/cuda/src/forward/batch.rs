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
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use model::HParams;
use std::sync::atomic::Ordering;

/// Working buffers for up to `n` sequences a step.
pub(crate) struct BatchBufs {
    n: usize,
    s: Scratch,
    tokens: CudaSlice<u32>,
    rows: CudaSlice<KvRow>,
    logits: CudaSlice<f32>,
    /// Each matvec's inputs, prepared once (launch::Rows).
    prep: CudaSlice<u8>,
    /// The captured step for each batch size (index n), made on first use.
    graphs: Vec<Option<Graph>>,
}

impl BatchBufs {
    fn new(g: &Gpu, hp: &HParams, n: usize, max_cols: usize) -> Result<BatchBufs> {
        Ok(BatchBufs {
            prep: g.zeros(n * prep_stride(max_cols))?,
            n,
            s: Scratch::new(g, hp, n)?,
            tokens: g.zeros(n)?,
            rows: g.upload(&vec![KvRow::default(); n])?,
            logits: g.zeros(n * hp.n_vocab)?,
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
        let n = seqs.len();
        if n == 0 {
            return Ok(f(&[]));
        }
        if n == 1 {
            let (token, kv) = &mut seqs[0];
            return self.forward_with(&[*token], kv, Logits::Last, f);
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
        if bufs.as_ref().is_some_and(|b| b.n < n) {
            *bufs = None; // free the smaller buffers before allocating the larger
        }
        let b = match &mut *bufs {
            Some(b) => b,
            none => none.insert(BatchBufs::new(
                g,
                hp,
                n.next_power_of_two().max(8),
                self.max_cols(),
            )?),
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
                graph.exec.launch().map_err(drv("graph launch"))?;
            }
            // SAFETY: as in `batch_launches`; the tables were written above.
            None => unsafe { self.batch_launches(b, n)? },
        }
        let r = g.download_with(&b.logits, n * vocab, f)?;
        for (_, kv) in seqs.iter_mut() {
            kv.len += 1;
        }
        Ok(r)
    }
}

impl CudaModel {
    /// The launches of a step over the first `n` rows of `b`'s tables.
    ///
    /// # Safety
    /// `n <= b.n`, and `b.rows` names `n` live caches of this model, each with room for its
    /// position (the callers check that before writing the table).
    unsafe fn batch_launches(&self, b: &BatchBufs, n: usize) -> Result<()> {
        let g = &self.gpu;
        let rows = g.ptr(&b.rows);
        let at = |layer| KvAt::Rows { rows, layer };
        let batch = Rows {
            n,
            prep: g.ptr(&b.prep),
        };
        // SAFETY: every buffer is sized for `n` rows (b.n >= n; prep for the widest input), and
        // the table's caches are as the caller guarantees.
        unsafe { self.step_launches(&b.s, g.ptr(&b.tokens), at, g.ptr(&b.logits), batch) }
    }

    /// Captures [`batch_launches`](Self::batch_launches) for `n` rows into a graph: it reads
    /// the tokens and the cache table from `b`'s device buffers, so it serves every step of
    /// that size.
    fn capture_batch(&self, b: &BatchBufs, n: usize) -> Result<Graph> {
        let s = &self.gpu.stream;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(drv("graph capture"))?;
        // SAFETY: captured, not run; when replayed, as in `forward_batch_with`.
        let launched = unsafe { self.batch_launches(b, n) };
        let ended = s
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(drv("graph capture"));
        launched?;
        let exec = ended?.ok_or(CudaError::Driver {
            what: "graph capture",
            msg: "empty graph".into(),
        })?;
        Ok(Graph { exec })
    }
}
