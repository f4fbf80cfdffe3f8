//! The KV cache of one sequence on the device (f16 keys and values, or f32), plus the per-sequence
//! working buffers and the captured decode graph, which refer to each other's addresses.

use crate::device::Gpu;
use crate::error::Result;
use crate::launch;
use crate::persistent::Persistent;
use cudarc::driver::{CudaGraph, CudaSlice};
use model::HParams;

/// Most tokens one prefill launch sequence handles; longer prompts run in chunks of this size.
pub(crate) const CHUNK: usize = 512;

/// Activations for up to `n` tokens.
pub(crate) struct Scratch {
    pub n: usize,
    pub x: CudaSlice<f32>,
    pub h: CudaSlice<f32>,
    pub q: CudaSlice<f32>,
    pub k: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
    pub att: CudaSlice<f32>,
    pub gate: CudaSlice<f32>,
    pub up: CudaSlice<f32>,
    /// Logits of one token.
    pub logits: CudaSlice<f32>,
}

/// Device addresses of a [`Scratch`]'s buffers, for kernel arguments.
#[derive(Clone, Copy)]
pub(crate) struct Ptrs {
    pub x: u64,
    pub h: u64,
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub att: u64,
    pub gate: u64,
    pub up: u64,
    pub logits: u64,
}

impl Scratch {
    pub fn ptrs(&self, gpu: &Gpu) -> Ptrs {
        let p = |b: &CudaSlice<f32>| gpu.ptr(b);
        Ptrs {
            x: p(&self.x),
            h: p(&self.h),
            q: p(&self.q),
            k: p(&self.k),
            v: p(&self.v),
            att: p(&self.att),
            gate: p(&self.gate),
            up: p(&self.up),
            logits: p(&self.logits),
        }
    }

    pub fn new(gpu: &Gpu, hp: &HParams, n: usize) -> Result<Scratch> {
        Ok(Scratch {
            n,
            x: gpu.zeros(n * hp.n_embd)?,
            h: gpu.zeros(n * hp.n_embd)?,
            q: gpu.zeros(n * hp.q_dim())?,
            k: gpu.zeros(n * hp.kv_dim())?,
            v: gpu.zeros(n * hp.v_dim())?,
            att: gpu.zeros(n * hp.n_head * hp.head_dim_v)?,
            gate: gpu.zeros(n * hp.n_ff)?,
            up: gpu.zeros(n * hp.n_ff)?,
            // One word more: the persistent decode kernel's error flag.
            logits: gpu.zeros(hp.n_vocab + 1)?,
        })
    }
}

/// A captured decode step. Its kernels' arguments are addresses in this cache and in the model
/// it was captured for.
pub(crate) struct Graph {
    pub exec: CudaGraph,
}

// SAFETY: the graph is only launched through `&mut CudaKvCache` while the model's stream lock is
// held, so it is never used from two threads at once; CUDA graphs may move between threads.
unsafe impl Send for Graph {}

/// Keys and values of every layer for up to `capacity` positions on the device, in f16 (the
/// default, as llama.cpp's CUDA backend) or f32 (exact storage, as the CPU's default cache).
pub struct CudaKvCache {
    pub(crate) model_uid: u64,
    capacity: usize,
    /// Elements between two layers' keys (values).
    pub(crate) kv_stride: usize,
    pub(crate) v_stride: usize,
    /// f32 elements (else f16). The buffers hold 16-bit words either way (two an f32 element).
    pub(crate) f32: bool,
    pub(crate) k: CudaSlice<u16>,
    pub(crate) v: CudaSlice<u16>,
    /// Positions filled so far (the next token goes to position `len`).
    pub len: usize,
    /// Start position of the current step, read by the kernels.
    pub(crate) pos: CudaSlice<i32>,
    /// Token ids of the current step.
    pub(crate) tokens: CudaSlice<u32>,
    pub(crate) decode: Scratch,
    /// A decode step's matvec input, prepared once (launch::Rows::prep) for `matvec_wide`.
    pub(crate) decode_prep: CudaSlice<u8>,
    pub(crate) prefill: Option<Scratch>,
    /// Logits of every token of a prefill chunk.
    pub(crate) logits_all: Option<CudaSlice<f32>>,
    pub(crate) graph: Option<Graph>,
    /// `MOLLA_ATT_BUCKETS=1` (an experiment): the decode graphs for short caches, each with
    /// `rope_attention` staging at most that many positions (forward.rs `att_bucket`).
    pub(crate) graphs_short: Vec<(usize, Graph)>,
    /// The persistent decode kernel's step list for this cache.
    pub(crate) pk: Option<Persistent>,
    /// What a decode step returns: the logits, or the greedy pick or top-k logits made on the
    /// device in `pick` (forward/pick.rs, forward/top.rs).
    pub(crate) reduce: crate::forward::pick::Reduce,
    pub(crate) pick: CudaSlice<f32>,
    /// Decode attention's split over several blocks a head (launch/split.rs), when the cache
    /// holds more than one tile.
    pub(crate) att_split: Option<launch::SplitScratch>,
    /// A persistent decode step's logits and error flag in mapped page-locked memory, written
    /// there by the head after the kernel (forward/persistent_decode.rs `mapped_logits`):
    /// allocated on first use.
    pub(crate) host_logits: Option<crate::mapped::HostWords>,
    /// Whether `host_logits` was asked for (it stays None when no page-locked memory was had).
    pub(crate) host_logits_tried: bool,
}

impl CudaKvCache {
    pub(crate) fn new(
        gpu: &Gpu,
        hp: &HParams,
        capacity: usize,
        model_uid: u64,
        f32: bool,
    ) -> Result<CudaKvCache> {
        let kv_stride = capacity * hp.kv_dim();
        let v_stride = capacity * hp.v_dim();
        let words = if f32 { 2 } else { 1 };
        Ok(CudaKvCache {
            model_uid,
            capacity,
            kv_stride,
            v_stride,
            f32,
            k: gpu.zeros(words * hp.n_layer * kv_stride)?,
            v: gpu.zeros(words * hp.n_layer * v_stride)?,
            len: 0,
            pos: gpu.zeros(1)?,
            tokens: gpu.zeros(CHUNK)?,
            decode: Scratch::new(gpu, hp, 1)?,
            decode_prep: gpu.zeros(launch::prep_stride(launch::max_cols(hp)))?,
            prefill: None,
            logits_all: None,
            graph: None,
            graphs_short: Vec::new(),
            pk: None,
            reduce: Default::default(),
            pick: gpu.zeros(
                crate::forward::pick::pick_buffer_words(hp.n_vocab)
                    .max(crate::forward::top::top_buffer_words(hp.n_vocab))
                    .max(launch::pick_wide_words(launch::wide_max_blocks(gpu))),
            )?,
            att_split: launch::SplitScratch::new(
                gpu,
                (1, hp.n_head, hp.head_dim_v),
                capacity,
                launch::split_blocks(gpu.sm_count, hp.n_head),
            )?,
            host_logits: None,
            host_logits_tried: false,
        })
    }

    /// The decode graph captured for `bucket` (forward.rs `att_bucket`; 0: the one graph of every
    /// step outside the experiment's short caches).
    pub(crate) fn decode_graph(&self, bucket: usize) -> Option<&Graph> {
        match bucket {
            0 => self.graph.as_ref(),
            b => self
                .graphs_short
                .iter()
                .find(|(s, _)| *s == b)
                .map(|(_, g)| g),
        }
    }

    /// The split decode attention runs with on this cache.
    pub(crate) fn split(&self, gpu: &Gpu) -> launch::AttSplit {
        self.att_split
            .as_ref()
            .map_or(launch::AttSplit::NONE, |s| s.split(gpu))
    }

    /// Bytes of one cached element (2 for f16, 4 for f32).
    pub(crate) fn elem_bytes(&self) -> usize {
        if self.f32 { 4 } else { 2 }
    }

    /// Whether keys and values are stored in f32.
    pub fn is_f32(&self) -> bool {
        self.f32
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the memory stays allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}
