//! The forward pass of a llama-family decoder on one CUDA device: prefill of many tokens (tiled
//! matmuls, in chunks of 512), or single-token decode (fused matvecs, replayed as a CUDA graph).

use crate::blas::BlasState;
use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use crate::kv::{CHUNK, CudaKvCache, Graph, Ptrs, Scratch};
use crate::launch::{self, Heads, KvAt, Out, Prep, Rows, Skip, WeightRef};
use crate::weights::DevMatrix;
use cpu::Logits;
use cudarc::driver::CudaSlice;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use model::{HParams, Model, RopeStyle};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Position from which one-token decode leaves the persistent kernel for the graph path by
/// default. The persistent kernel attends with one block a head, the graph path splits a long
/// cache over several (launch/split.rs), so the persistent kernel's step grows faster with the
/// cache. Session 54 on the H200 (`molla bench -d D -p 0 -n 128`, positions D .. D + 127, tg tok/s
/// persistent / graph): SmolLM2 Q4_1 1292 / 1103 at D = 768, 1121 / 1099 at 1024, 990 / 1096 at
/// 1280; Q8_0 1100 / 1031 at 1024, 979 / 1027 at 1280; Qwen2.5-0.5B Q4_K_M 1308 / 898 at 768,
/// 1174 / 897 at 1024, 1065 / 896 at 1280, 975 / 929 at 1536, 832 / 905 at 2048. They cross at
/// about 1130 (SmolLM2 Q4_1), 1240 (Q8_0) and 1800 positions (Qwen2.5): 1024 is under all three.
/// (768 from session 12 to 53, when the graph path was slower: SmolLM2 Q4_1 716 / 927 at 1024.)
pub const PK_MAX_POS: usize = 1024;

/// Largest head width the attention kernel handles.
pub(crate) const MAX_HEAD_DIM: usize = 256;

struct DevLayer {
    attn_norm: CudaSlice<f32>,
    wq: DevMatrix,
    wk: DevMatrix,
    wv: DevMatrix,
    bq: Option<CudaSlice<f32>>,
    bk: Option<CudaSlice<f32>>,
    bv: Option<CudaSlice<f32>>,
    /// qwen3's per-head RMSNorm weights of q and k (head_dim values each).
    qk_norm: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    wo: DevMatrix,
    /// gemma's RMSNorm weights of the attention and FFN outputs before their residual adds.
    post_attn_norm: Option<CudaSlice<f32>>,
    post_ffn_norm: Option<CudaSlice<f32>>,
    ffn_norm: CudaSlice<f32>,
    w_gate: DevMatrix,
    w_up: DevMatrix,
    w_down: DevMatrix,
    /// With fused q/k/v (`PkBuild::fuse`, layers after the first): C, this layer's q/k/v rows
    /// over the residual and the SwiGLU output of the layer before (crate::fused).
    fused: Option<crate::fused::DevFused>,
}

impl DevLayer {
    /// Bytes of the layer's weight matrices.
    fn bytes(&self) -> usize {
        [
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wo,
            &self.w_gate,
            &self.w_up,
            &self.w_down,
        ]
        .iter()
        .map(|w| w.rows * w.row_bytes)
        .sum()
    }
}

/// Layers of at least this many weight bytes decode on the graph path by default (H200, in
/// process: the Llama-3.1-8B shape's 117 MiB layers of Q4_K 1660 tok/s graph vs 1330 persistent
/// at six layers; the Qwen2.5-0.5B shape's 10 MiB layers of Q5_0 742 vs 1138).
const PERSISTENT_MAX_LAYER_BYTES: usize = 32 << 20;

/// A model whose weights live on a CUDA device, with the same contract as `cpu::CpuModel`.
///
/// It may be shared between threads (forward passes take turns on its one stream). Caches are
/// freed on that stream too: drop a [`CudaKvCache`] only while no other thread is inside the first
/// decode step of another cache of this model (which captures the CUDA graph).
pub struct CudaModel {
    gpu: Gpu,
    hp: HParams,
    uid: u64,
    heads: Heads,
    embd: DevMatrix,
    /// `None` when the output head is tied to the embedding.
    output: Option<DevMatrix>,
    output_norm: CudaSlice<f32>,
    /// Rope angular frequencies (f64), as `cpu::ops::Rope` computes them.
    freqs: CudaSlice<f64>,
    /// Those of the sliding-window layers, when the model has any (`cpu::ops::Rope::sliding`).
    freqs_swa: Option<CudaSlice<f64>>,
    /// Why the persistent kernel can never run this model (a feature it lacks): then
    /// `set_persistent(true)` leaves it off.
    pk_never: Option<String>,
    layers: Vec<DevLayer>,
    graphs: AtomicBool,
    /// Whether decode uses the persistent kernel (one launch a token) where it can.
    persistent: AtomicBool,
    /// Whether caches made from now on store f32 (else f16).
    cache_f32: AtomicBool,
    /// Why the persistent kernel is off (set once it was tried and failed).
    persistent_off: Mutex<Option<String>>,
    /// With `MOLLA_PK_TRACE=1` (and `MOLLA_KDEFS=PKMEASURE`): the last persistent step's trace (see `persistent_trace`).
    pk_trace: Mutex<Option<crate::persistent::Trace>>,
    /// Blocks of the last persistent launch grid built.
    pk_grid: std::sync::atomic::AtomicU32,
    /// Whether the last persistent kernel chosen is the one built for packed steps only.
    pk_packed: AtomicBool,
    /// The positions the kernel built for short caches takes (0: none, or `MOLLA_PK_SHORT=0`).
    pk_short: AtomicUsize,
    /// Whether the last persistent step list chosen runs the head after the kernel.
    pk_head_out: AtomicBool,
    /// Positions from which decode leaves the persistent kernel for the graph path, whose
    /// attention splits over several blocks a head (see `set_persistent_max_pos`).
    pk_max_pos: std::sync::atomic::AtomicUsize,
    /// Where persistent kernels built from now on run the head: 0 as `MOLLA_PK_HEAD` says, 1
    /// after the kernel, 2 inside it ([`CudaModel::set_persistent_head`]).
    pk_head: std::sync::atomic::AtomicU8,
    /// The page-locked slots of chained greedy decoding (forward/chain.rs), kept from one run
    /// to the next.
    chain_ring: Mutex<Option<chain::Ring>>,
    /// cuBLAS for the prefill matmuls, set up on the first prefill.
    blas: Mutex<BlasState>,
    /// Serialises forward passes: they share one stream, and a graph capture must see no
    /// other thread's launches.
    lock: Mutex<()>,
    /// Buffers of the batched decode step ([`CudaModel::forward_batch`]), grown on demand.
    batch: Mutex<Option<batch::BatchBufs>>,
}

mod batch;
mod chain;
mod layer;
pub(crate) mod persistent_decode;
pub(crate) mod pick;
mod prefill;
pub(crate) mod top;

pub use chain::chain_on;
pub use pick::Pick;
pub use top::{TOPK_MAX, TopLogits, top_k_fits};

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// Fewest prefill rows that go through cuBLAS (`MOLLA_CUBLAS_MIN_N`, default 32): below it the
/// matrix's dequantization to f16 costs more than the tensor cores save.
fn cublas_min_rows() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MOLLA_CUBLAS_MIN_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32)
    })
}

fn check_shape(hp: &HParams, max_smem: usize) -> Result<()> {
    let bad = |m: String| Err(CudaError::Unsupported(m));
    if hp.head_dim > MAX_HEAD_DIM || hp.head_dim_v > MAX_HEAD_DIM || !hp.head_dim.is_multiple_of(2)
    {
        return bad(format!(
            "head widths {}/{} (need even and at most {MAX_HEAD_DIM})",
            hp.head_dim, hp.head_dim_v
        ));
    }
    for (what, cols) in [
        ("embedding", hp.n_embd),
        ("attention output", hp.n_head * hp.head_dim_v),
        ("ffn", hp.n_ff),
    ] {
        if crate::launch::prep_stride(cols) > max_smem || !cols.is_multiple_of(8) {
            return bad(format!(
                "{what} width {cols} (need a multiple of 8 and at most {})",
                max_smem * 2 / 13
            ));
        }
    }
    Ok(())
}

impl CudaModel {
    /// Uploads the weights of `model` (in their GGUF block layout) to device `ordinal` and
    /// compiles the kernels. Fails with a one-line error when there is no driver or device,
    /// or when a tensor type or shape is not supported.
    pub fn new(model: &Model, ordinal: usize) -> Result<CudaModel> {
        if !model.arch.cuda {
            return Err(CudaError::Unsupported(format!(
                "the {} architecture does not run on CUDA yet (--device cpu or gpu)",
                model.arch.name
            )));
        }
        let gpu = Gpu::with_build(ordinal, crate::persistent::pk_build(model))?;
        let hp = model.hp.clone();
        check_shape(&hp, gpu.max_smem)?;
        let f = &model.file;
        let m = |w: &model::Matrix| DevMatrix::from_model(&gpu, f, w);
        let v = |x: &[f32]| gpu.upload(x);
        let ov = |x: &Option<Vec<f32>>| x.as_deref().map(|x| gpu.upload(x)).transpose();
        let mut layers = Vec::with_capacity(model.layers.len());
        for l in &model.layers {
            layers.push(DevLayer {
                attn_norm: v(&l.attn_norm)?,
                wq: m(&l.wq)?,
                wk: m(&l.wk)?,
                wv: m(&l.wv)?,
                bq: ov(&l.bq)?,
                bk: ov(&l.bk)?,
                bv: ov(&l.bv)?,
                qk_norm: match (&l.q_norm, &l.k_norm) {
                    (Some(q), Some(k)) => Some((v(q)?, v(k)?)),
                    _ => None,
                },
                wo: m(&l.wo)?,
                post_attn_norm: ov(&l.post_attn_norm)?,
                post_ffn_norm: ov(&l.post_ffn_norm)?,
                ffn_norm: v(&l.ffn_norm)?,
                w_gate: m(&l.w_gate)?,
                w_up: m(&l.w_up)?,
                w_down: m(&l.w_down)?,
                fused: None,
            });
        }
        if gpu.pk_build.fuse {
            // A layer whose C cannot be made (a shape fused.rs refuses) keeps its q/k/v step.
            for (li, l) in layers.iter_mut().enumerate().skip(1) {
                l.fused = crate::fused::DevFused::build(&gpu, model, li).ok();
            }
        }
        let rope = cpu::ops::Rope::new(&hp, model.rope_freqs.as_deref());
        let heads = Heads {
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            head_dim_v: hp.head_dim_v,
            n_rot: hp.n_rot,
            neox: hp.rope_style == RopeStyle::Neox,
            scale: hp.attn_scale,
            window: 0,
            softcap: hp.attn_softcap.unwrap_or(0.0),
        };
        let freqs_swa = cpu::ops::Rope::sliding(&hp)
            .map(|r| gpu.upload(&r.freqs))
            .transpose()?;
        let graphs = std::env::var("MOLLA_CUDA_GRAPH").map_or(true, |v| v != "0");
        // The persistent kernel holds one block of 8 warps an SM, which streams big matrices
        // slower than the graph's `matvec_wide` (four blocks an SM): it decodes models with small
        // layers, the graph those with big ones, unless MOLLA_PERSISTENT says (1 on, 0 off).
        let layer_bytes = layers.iter().map(DevLayer::bytes).max().unwrap_or(0);
        let pk_never = crate::persistent::pk_lacks(model);
        let (persistent, why_not) = match std::env::var("MOLLA_PERSISTENT").as_deref() {
            Ok("0") => (false, None),
            _ if pk_never.is_some() => (false, pk_never.clone()),
            Ok("1") => (true, None),
            _ if layer_bytes >= PERSISTENT_MAX_LAYER_BYTES => (
                false,
                Some(format!(
                    "layers of {} MiB: the graph's wide matvecs stream them faster",
                    layer_bytes >> 20
                )),
            ),
            _ => (true, None),
        };
        Ok(CudaModel {
            embd: m(&model.tok_embd)?,
            output: if model.tied_output {
                None
            } else {
                Some(m(&model.output)?)
            },
            output_norm: v(&model.output_norm)?,
            freqs: gpu.upload(&rope.freqs)?,
            freqs_swa,
            pk_never,
            layers,
            heads,
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            graphs: AtomicBool::new(graphs),
            persistent: AtomicBool::new(persistent),
            cache_f32: AtomicBool::new(false),
            persistent_off: Mutex::new(why_not),
            blas: Mutex::new(BlasState::Untried),
            pk_grid: std::sync::atomic::AtomicU32::new(0),
            pk_packed: AtomicBool::new(false),
            pk_short: AtomicUsize::new(0),
            pk_head_out: AtomicBool::new(false),
            pk_head: std::sync::atomic::AtomicU8::new(0),
            chain_ring: Mutex::new(None),
            pk_max_pos: std::sync::atomic::AtomicUsize::new(
                std::env::var("MOLLA_PK_MAX_POS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(PK_MAX_POS),
            ),
            pk_trace: Mutex::new(None),
            lock: Mutex::new(()),
            batch: Mutex::new(None),
            hp,
            gpu,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.gpu.name().to_string()
    }

    /// The device the model lives on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The model's hyper-parameters.
    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    /// Turns CUDA-graph replay of the decode step on or off (on by default; the environment
    /// variable `MOLLA_CUDA_GRAPH=0` turns it off at load).
    pub fn set_graphs(&self, on: bool) {
        self.graphs.store(on, Ordering::Relaxed);
    }

    /// Turns the persistent decode kernel on or off (by default on for models whose layers are
    /// under 32 MiB of weights; `MOLLA_PERSISTENT=0` / `1` turns it off / on at load). Off, decode
    /// replays a CUDA graph of fused kernels (or launches them). A model with a feature the
    /// kernel lacks (`decode_path` says which) stays off.
    pub fn set_persistent(&self, on: bool) {
        if on && self.pk_never.is_some() {
            return;
        }
        self.persistent.store(on, Ordering::Relaxed);
        if on {
            *self
                .persistent_off
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Decode steps at position `pos` and later leave the persistent kernel for the graph path
    /// (default [`PK_MAX_POS`]; `MOLLA_PK_MAX_POS` at load; `usize::MAX`: never). The two give
    /// the same bits.
    pub fn set_persistent_max_pos(&self, pos: usize) {
        self.pk_max_pos.store(pos, Ordering::Relaxed);
    }

    /// Where persistent kernels built from now on (a cache's, at its first decode step) run the
    /// head: after the kernel on `matvec_wide` (`Some(true)`), inside it (`Some(false)`), or as
    /// `MOLLA_PK_HEAD` and the head's size decide (`None`, the default). The same bits either
    /// way.
    pub fn set_persistent_head(&self, outside: Option<bool>) {
        let v = match outside {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.pk_head.store(v, Ordering::Relaxed);
    }

    /// KV caches made from now on store keys and values in f32 (`true`) or f16 (`false`, the
    /// default, as llama.cpp's CUDA backend). f32 is the exact storage the CPU uses by default;
    /// it doubles the cache's bytes, and its decode steps replay the CUDA graph (the persistent
    /// kernel reads f16 caches only). Batched steps (the server) take f16 caches only.
    pub fn set_cache_f32(&self, on: bool) {
        self.cache_f32.store(on, Ordering::Relaxed);
    }

    /// How decode steps run: "persistent" (one launch a token), "graph" (a replayed CUDA graph)
    /// or "launches"; with the reason when the persistent kernel was tried and refused.
    pub fn decode_path(&self) -> String {
        let grid = self.pk_grid.load(Ordering::Relaxed);
        if self.cache_f32.load(Ordering::Relaxed) {
            let base = if self.graphs.load(Ordering::Relaxed) {
                "graph"
            } else {
                "launches"
            };
            return format!("{base} (f32 KV cache: the persistent kernel reads f16 caches)");
        }
        let base = if self.persistent.load(Ordering::Relaxed) {
            let max = self.pk_max_pos.load(Ordering::Relaxed);
            let after = if max < usize::MAX && self.graphs.load(Ordering::Relaxed) {
                format!("; graph from position {max}")
            } else {
                String::new()
            };
            if grid > 0 {
                let head = if !self.pk_head_out.load(Ordering::Relaxed) {
                    ""
                } else if persistent_decode::mapped_logits() {
                    ", head on matvec_wide, logits into mapped host memory"
                } else {
                    ", head on matvec_wide"
                };
                let build = crate::compile::PkBuild {
                    packed: self.pk_packed.load(Ordering::Relaxed),
                    ..self.gpu.pk_build
                }
                .describe();
                let short = match self.pk_short.load(Ordering::Relaxed) {
                    0 => String::new(),
                    n => format!("; built for short caches up to position {n}"),
                };
                return format!("persistent ({grid} blocks{head}, {build}){short}{after}");
            }
            format!("persistent{after}")
        } else if self.graphs.load(Ordering::Relaxed) {
            "graph".to_string()
        } else {
            "launches".to_string()
        };
        let base = match &*self
            .persistent_off
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            Some(why) => format!("{base} (persistent off: {why})"),
            None => base,
        };
        // The graph path's measurement knob (launch/skip.rs) is said, as it makes logits wrong.
        match Skip::get().bits() {
            0 => base,
            b => format!("{base} [MOLLA_GRAPH_SKIP={b}: launches left out, logits wrong]"),
        }
    }

    /// How prefill matmuls ran: "cublas f16 hi+lo" (tensor cores, activations split in two f16
    /// parts), "cublas f16", "simt", or "not yet run".
    pub fn prefill_path(&self) -> &'static str {
        match *self.blas.lock().unwrap_or_else(|e| e.into_inner()) {
            BlasState::Ready(ref b) if b.split => "cublas f16 hi+lo",
            BlasState::Ready(_) => "cublas f16",
            BlasState::Absent => "simt",
            BlasState::Untried => "not yet run",
        }
    }

    /// A KV cache on the device for `capacity` positions of this model: f16, or f32 after
    /// [`set_cache_f32`](Self::set_cache_f32).
    pub fn new_cache(&self, capacity: usize) -> Result<CudaKvCache> {
        if capacity == 0 || capacity > i32::MAX as usize / self.hp.kv_dim().max(self.hp.v_dim()) {
            return Err(CudaError::Unsupported(format!(
                "KV cache capacity {capacity}"
            )));
        }
        // Allocations are stream-ordered: keep them out of another thread's graph capture.
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let f32 = self.cache_f32.load(Ordering::Relaxed);
        CudaKvCache::new(&self.gpu, &self.hp, capacity, self.uid, f32)
    }

    /// Runs `tokens` at positions `kv.len..`, appends their keys and values to `kv`, and returns
    /// logits: `n_vocab` values for the last token, or for every token with [`Logits::All`].
    pub fn forward(&self, tokens: &[u32], kv: &mut CudaKvCache, which: Logits) -> Result<Vec<f32>> {
        self.forward_with(tokens, kv, which, <[f32]>::to_vec)
    }

    /// [`forward`](Self::forward) with the logits read by `f` where they land on the host: a
    /// decode step's in the mapped page-locked words the head wrote them to (persistent decode),
    /// or in the pinned staging buffer its one copy from the device went to, with no further
    /// copy (llama.cpp's decode reads its logits in place the same way).
    pub fn forward_with<R>(
        &self,
        tokens: &[u32],
        kv: &mut CudaKvCache,
        which: Logits,
        f: impl FnOnce(&[f32]) -> R,
    ) -> Result<R> {
        let n = tokens.len();
        if kv.model_uid != self.uid {
            return Err(CudaError::CacheShape);
        }
        let start = kv.len;
        let vocab = self.hp.n_vocab;
        cpu::check_input(tokens, start, kv.capacity(), vocab)?;
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.gpu.ctx.bind_to_thread().map_err(drv("bind context"))?;
        if n == 1 {
            return self.decode(tokens[0], kv, f);
        }
        let mut out = Vec::with_capacity(if which == Logits::All {
            n * vocab
        } else {
            vocab
        });
        let count = n.div_ceil(CHUNK);
        for (i, chunk) in tokens.chunks(CHUNK).enumerate() {
            let want = match which {
                Logits::All => Some(Logits::All),
                Logits::Last => (i + 1 == count).then_some(Logits::Last),
            };
            self.prefill(chunk, kv, want, &mut out)?;
        }
        Ok(f(&out))
    }

    fn output(&self) -> WeightRef {
        self.output.as_ref().unwrap_or(&self.embd).r(&self.gpu)
    }

    fn decode<R, F: FnOnce(&[f32]) -> R>(
        &self,
        token: u32,
        kv: &mut CudaKvCache,
        f: F,
    ) -> Result<R> {
        let g = &self.gpu;
        let mut f = f;
        if self.persistent.load(Ordering::Relaxed)
            && !kv.f32
            && kv.len < self.pk_max_pos.load(Ordering::Relaxed)
        {
            match self.decode_persistent(token, kv, f)? {
                Ok(r) => return Ok(r),
                Err(back) => f = back,
            }
        }
        g.write(&[token], &mut kv.tokens)?;
        g.write(&[kv.len as i32], &mut kv.pos)?;
        let bucket = att_bucket(kv.len);
        if self.graphs.load(Ordering::Relaxed) && kv.decode_graph(bucket).is_none() {
            match self.capture(kv, bucket) {
                Ok(graph) if bucket == 0 => kv.graph = Some(graph),
                Ok(graph) => kv.graphs_short.push((bucket, graph)),
                // Capture unsupported here: fall back to plain launches from now on.
                Err(_) => self.graphs.store(false, Ordering::Relaxed),
            }
        }
        if let Some(graph) = kv
            .decode_graph(bucket)
            .filter(|_| self.graphs.load(Ordering::Relaxed))
        {
            launch::count_launch();
            graph.exec.launch().map_err(drv("graph launch"))?;
        } else {
            // SAFETY: every address comes from this model's or this cache's live buffers, sized
            // for one token (checked against the model at cache creation).
            unsafe { self.decode_launches(kv, bucket)? };
        }
        // SAFETY: the step above wrote this cache's logits.
        let (buf, words) = unsafe { self.step_result(kv, false)? };
        let r = g.download_with(buf, words, f)?;
        kv.len += 1;
        Ok(r)
    }

    /// A prefill matmul of `n` rows: cuBLAS on f16 copies when it is loaded and `n` is large
    /// enough to pay for dequantizing the matrix, else the SIMT tiled kernel.
    ///
    /// # Safety
    /// As `launch::matmul`.
    unsafe fn matmul(&self, blas: &mut BlasState, o: &Out, x: u64, n: usize) -> Result<()> {
        if let BlasState::Ready(b) = blas
            && n >= cublas_min_rows()
        {
            // SAFETY: as the caller guarantees.
            return unsafe { b.matmul(&self.gpu, o, x, n) };
        }
        // SAFETY: as the caller guarantees.
        unsafe { launch::matmul(&self.gpu, o, x, n) }
    }

    /// Most weights of one matrix (the cuBLAS scratch).
    fn max_weights(&self) -> usize {
        let mut m = self.output.as_ref().unwrap_or(&self.embd).rows * self.hp.n_embd;
        for l in &self.layers {
            for w in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
                m = m.max(w.rows * w.cols);
            }
        }
        m
    }

    /// Widest matmul input.
    fn max_cols(&self) -> usize {
        launch::max_cols(&self.hp)
    }

    /// Captures the decode launches into a graph (the step's token and position are read from
    /// device memory, so one graph serves every step of this cache; with `stage_max`, not 0,
    /// `rope_attention` stages at most that many positions: [`att_bucket`]).
    fn capture(&self, kv: &CudaKvCache, stage_max: usize) -> Result<Graph> {
        // SAFETY: captured, not run; when replayed, as in `decode`.
        self.capture_with(|| unsafe { self.decode_launches(kv, stage_max) })
    }

    /// The launches `launches` makes on the stream, captured into a graph instead of run.
    pub(crate) fn capture_with(&self, launches: impl FnOnce() -> Result<()>) -> Result<Graph> {
        let s = &self.gpu.stream;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(drv("graph capture"))?;
        let launched = launches();
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

    /// Layer `li`'s key and value cache addresses.
    fn cache_ptrs(&self, kv: &CudaKvCache, li: usize) -> (u64, u64) {
        let g = &self.gpu;
        (
            g.ptr(&kv.k) + (li * kv.kv_stride * kv.elem_bytes()) as u64,
            g.ptr(&kv.v) + (li * kv.v_stride * kv.elem_bytes()) as u64,
        )
    }

    /// One output of a matvec or matmul: y = W·x (+ bias) (+ y when accumulating).
    fn out(&self, w: &DevMatrix, y: u64, bias: u64, accumulate: bool) -> Out {
        Out {
            w: w.r(&self.gpu),
            y,
            bias,
            accumulate,
            fixed: false,
        }
    }

    fn opt(&self, b: &Option<CudaSlice<f32>>) -> u64 {
        b.as_ref().map_or(0, |b| self.gpu.ptr(b))
    }

    /// # Safety
    /// `kv` was made by this model (its buffers are sized for it).
    unsafe fn decode_launches(&self, kv: &CudaKvCache, stage_max: usize) -> Result<()> {
        let g = &self.gpu;
        let pos = g.ptr(&kv.pos);
        let split = launch::AttSplit {
            stage_max: stage_max as u32,
            ..kv.split(g)
        };
        let at = |li: usize| KvAt::One {
            cache: self.cache_ptrs(kv, li),
            pos,
            f32: kv.f32,
            split,
        };
        let logits = g.ptr(&kv.decode.logits);
        // SAFETY: the decode scratch holds one token and the cache has room for it.
        let rows = Rows {
            n: 1,
            prep: g.ptr(&kv.decode_prep),
        };
        unsafe { self.step_launches(&kv.decode, g.ptr(&kv.tokens), at, logits, rows, None) }
    }

    /// The launches of one decode step over `rows.n` tokens, each at its own cache and position
    /// (layer `li` at `at(li)`; one sequence: `Rows::ONE`): embedding, per layer the fused
    /// matvecs, rope, cache store and attention; the head's logits to `logits`: of every row, or
    /// with `wanted` = (device i32 row indices, count) of those rows only, in that order. Each
    /// row gets the bits a decode step of that token alone gives.
    ///
    /// # Safety
    /// `s` holds `n` rows, `tokens` `n` device u32s, `logits` as many rows of the vocabulary as
    /// the head writes, every cache `at` names has room for its position, `wanted`'s indices are
    /// rows below n, and `rows.prep` is as `launch::matvec_rows` needs for the widest input
    /// (`self.max_cols()`).
    unsafe fn step_launches(
        &self,
        s: &Scratch,
        tokens: u64,
        at: impl Fn(usize) -> KvAt,
        logits: u64,
        rows: Rows,
        wanted: Option<(u64, usize)>,
    ) -> Result<()> {
        let n = rows.n;
        let (g, hp) = (&self.gpu, &self.hp);
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
            ..
        } = s.ptrs(g);
        let eps = hp.rms_eps;
        let out =
            |w: &DevMatrix, y: u64, bias: u64, accumulate: bool| self.out(w, y, bias, accumulate);
        // A measurement (launch/skip.rs): kinds of launch left out, the logits then wrong.
        let skip = launch::Skip::get();
        // SAFETY (all launches): as the caller guarantees.
        unsafe {
            self.embed(tokens, n, x)?;
            for (li, l) in self.layers.iter().enumerate() {
                let qkv = [
                    out(&l.wq, q, self.opt(&l.bq), false),
                    out(&l.wk, k, self.opt(&l.bk), false),
                    out(&l.wv, v, self.opt(&l.bv), false),
                ];
                let norm = Prep::RmsNorm(p(&l.attn_norm), eps);
                let norm = skip.prep(Skip::NORM, norm, &qkv, hp.n_embd, rows);
                if !skip.has(Skip::QKV) {
                    launch::matvec_rows(g, &qkv, hp.n_embd, x, norm, rows)?;
                }
                // Rows summed in fixed point when the persistent kernel folds wo (the same bits);
                // into h first when the branch is normed or scaled before its add (gemma,
                // granite).
                let (wo, wo_branch) = self.residual_out(&l.wo, &l.post_attn_norm, (x, h));
                let wo = [Out {
                    fixed: wo_branch.is_none() && g.pk_build.fold,
                    ..wo
                }];
                let att_cols = hp.n_head * hp.head_dim_v;
                // wo's input (by default) and down's (an experiment) quantized by the kernel that
                // computes them, not by a preparation launch (launch/fused.rs).
                let att_prep = launch::att_prep_on()
                    && hp.head_dim_v.is_multiple_of(32)
                    && launch::goes_wide(&wo, att_cols, rows);
                let ready = if skip.has(Skip::ATT) {
                    att_prep
                } else {
                    self.rope_attend(li, (q, k, v), at(li), att, n, att_prep.then_some(rows.prep))?
                };
                let wo_prep = if ready { Prep::Ready } else { Prep::Plain };
                if !skip.has(Skip::WO) {
                    launch::matvec_rows(g, &wo, att_cols, att, wo_prep, rows)?;
                }
                self.join_branch((x, h), wo_branch, n)?;
                let gu = [out(&l.w_gate, gate, 0, false), out(&l.w_up, up, 0, false)];
                let norm = Prep::RmsNorm(p(&l.ffn_norm), eps);
                let norm = skip.prep(Skip::NORM, norm, &gu, hp.n_embd, rows);
                let (down, down_branch) = self.residual_out(&l.w_down, &l.post_ffn_norm, (x, h));
                let down = [down];
                let silu = hp.ffn_act == model::FfnAct::Silu;
                if !skip.has(Skip::GATE_UP) {
                    launch::matvec_rows(g, &gu, hp.n_embd, x, norm, rows)?;
                }
                let act = if silu {
                    Prep::SwiGlu(up)
                } else {
                    Prep::GeGlu(up)
                };
                let glu = skip.prep(Skip::SWIGLU, act, &down, hp.n_ff, rows);
                if !skip.has(Skip::DOWN) {
                    launch::matvec_rows(g, &down, hp.n_ff, gate, glu, rows)?;
                }
                self.join_branch((x, h), down_branch, n)?;
            }
            let head = [self.head_out(logits)];
            let norm = Prep::RmsNorm(p(&self.output_norm), eps);
            let n_out = match wanted {
                None if skip.has(Skip::HEAD) => return Ok(()),
                None => {
                    let norm = skip.prep(Skip::NORM, norm, &head, hp.n_embd, rows);
                    launch::matvec_rows(g, &head, hp.n_embd, x, norm, rows)?;
                    n
                }
                Some((idx, ns)) => {
                    // The wanted rows side by side in h (unused by decode), then the head on them.
                    launch::gather_rows(g, x, idx, h, ns, hp.n_embd)?;
                    let sel = Rows { n: ns, ..rows };
                    launch::matvec_rows(g, &head, hp.n_embd, h, norm, sel)?;
                    ns
                }
            };
            self.finish_logits(logits, n_out)
        }
    }
}

/// `MOLLA_ATT_BUCKETS=1` (an experiment, session 52): the positions `rope_attention` stages in
/// the decode step of a cache holding `len` positions, when fewer than the device allows: the
/// smallest of 64 and 128 that holds them and this one, each with a graph of its own (0: the
/// device's cap, the one graph of every other step). Its dynamic shared memory (the 8B's 128 KiB
/// a block at 256 positions) then fits an SM beside the q/k/v launch's last blocks, where a
/// block of 128 KiB waits for the SM to drain. The kernel reads from the cache in global memory
/// whatever does not fit, so the bits are the same. Measured on the H100's real 8B file: +0.24%
/// tg128 (403.5-404.2 against 402.5-403.2 tok/s), not worth two more graph captures a cache.
fn att_bucket(len: usize) -> usize {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var("MOLLA_ATT_BUCKETS").is_ok_and(|v| v == "1")) {
        return 0;
    }
    [64, 128].into_iter().find(|&b| len < b).unwrap_or(0)
}
