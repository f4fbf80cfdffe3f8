//! A model loaded for the CPU or a CUDA device, and the KV cache that goes with it (mirrors
//! `molla`'s own `backend.rs`, with typed errors).

use crate::error::ServerError;
use cpu::{CpuModel, KvCache, KvPool, Logits};
use model::{HParams, Model};
#[cfg(any(feature = "cuda", feature = "gpu"))]
use std::sync::Mutex;

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(usize),
    /// The wgpu backend's preferred adapter (Metal, Vulkan or DirectX 12).
    Gpu,
}

/// The device to load `model` on: `device`, or the CPU when `device` was `auto`'s choice and
/// that backend does not run the model's family; an explicit device is kept,
/// and [`Backend::new`] then says why it cannot run there.
pub fn device_for(model: &Model, device: Device, auto: bool) -> Device {
    let runs = match device {
        Device::Cpu => true,
        Device::Cuda(_) => model.arch.cuda,
        Device::Gpu => model.arch.wgpu,
    };
    if auto && !runs { Device::Cpu } else { device }
}

/// A model ready to run on one backend.
pub enum Backend {
    Cpu(Box<CpuModel>),
    #[cfg(feature = "cuda")]
    Cuda(Box<OnGpu<cuda::CudaModel>>),
    #[cfg(feature = "gpu")]
    Gpu(Box<OnGpu<gpu::GpuModel>>),
}

/// A model on a GPU backend, with the CPU model of the same file for what the GPU backends do
/// not compute (embeddings' hidden states), made on first use: it maps the same file, so it
/// copies no weights.
#[cfg(any(feature = "cuda", feature = "gpu"))]
pub struct OnGpu<M> {
    gpu: M,
    cpu: Mutex<CpuSide>,
}

/// The CPU side of an [`OnGpu`]: the model until first used, then the CPU model.
#[cfg(any(feature = "cuda", feature = "gpu"))]
enum CpuSide {
    Model(Option<Box<Model>>),
    Ready(Box<CpuModel>),
}

#[cfg(any(feature = "cuda", feature = "gpu"))]
impl<M> OnGpu<M> {
    fn new(gpu: M, model: Model) -> OnGpu<M> {
        OnGpu {
            gpu,
            cpu: Mutex::new(CpuSide::Model(Some(Box::new(model)))),
        }
    }

    /// The final hidden states of `tokens` in a fresh cache, on the CPU model.
    fn cpu_hidden_states(&self, tokens: &[u32]) -> Result<Vec<f32>, ServerError> {
        let mut side = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        if let CpuSide::Model(m) = &mut *side
            && let Some(model) = m.take()
        {
            *side = CpuSide::Ready(Box::new(CpuModel::new(*model)));
        }
        match &*side {
            CpuSide::Ready(cpu) => {
                let mut kv = cpu.new_cache(tokens.len());
                Ok(cpu.hidden_states(tokens, &mut kv)?)
            }
            CpuSide::Model(_) => Err(ServerError::Unsupported("embeddings: no CPU model")),
        }
    }
}

#[cfg(any(feature = "cuda", feature = "gpu"))]
impl<M> std::ops::Deref for OnGpu<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.gpu
    }
}

#[cfg(any(feature = "cuda", feature = "gpu"))]
impl<M> std::ops::DerefMut for OnGpu<M> {
    fn deref_mut(&mut self) -> &mut M {
        &mut self.gpu
    }
}

/// A sequence's KV cache, on the backend that made it.
#[allow(clippy::large_enum_variant)] // one per sequence: the size does not matter
pub enum Cache {
    Cpu(KvCache),
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaKvCache),
    #[cfg(feature = "gpu")]
    Gpu(gpu::GpuKvCache),
}

impl Backend {
    /// Loads `model` onto `device`.
    pub fn new(model: Model, device: Device) -> Result<Backend, ServerError> {
        match device {
            Device::Cpu => Ok(Backend::Cpu(Box::new(CpuModel::new(model)))),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => {
                let gpu = cuda::CudaModel::new(&model, ordinal)?;
                Ok(Backend::Cuda(Box::new(OnGpu::new(gpu, model))))
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(ServerError::NoCuda),
            #[cfg(feature = "gpu")]
            Device::Gpu => {
                let gpu = gpu::GpuModel::new(&model)?;
                Ok(Backend::Gpu(Box::new(OnGpu::new(gpu, model))))
            }
            #[cfg(not(feature = "gpu"))]
            Device::Gpu => Err(ServerError::NoGpu),
        }
    }

    /// The KV cache element type for caches made from now on (CUDA: f32 caches decode on the
    /// graph path and are refused by batched steps, so the server leaves CUDA at f16).
    pub fn set_cache_type(&mut self, ty: cpu::CacheType) {
        // Without the GPU features the CPU is the only backend.
        #[allow(irrefutable_let_patterns)]
        if let Backend::Cpu(m) = self {
            m.set_cache_type(ty);
        }
        #[cfg(feature = "gpu")]
        if let Backend::Gpu(m) = self {
            m.set_cache_f16(ty == cpu::CacheType::F16);
        }
        #[cfg(feature = "cuda")]
        if let Backend::Cuda(m) = self {
            m.set_cache_f32(ty == cpu::CacheType::F32);
        }
    }

    pub fn hparams(&self) -> &HParams {
        match self {
            Backend::Cpu(m) => &m.model.hp,
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => m.hparams(),
            #[cfg(feature = "gpu")]
            Backend::Gpu(m) => m.hparams(),
        }
    }

    /// "cpu" or the GPU's name.
    pub fn device_name(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".into(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => m.device_name(),
            #[cfg(feature = "gpu")]
            Backend::Gpu(m) => m.device_name(),
        }
    }

    /// The mixed-chunk limit (`Config::mix_max`) this backend gets when none is given: on the
    /// CPU rows of decode are slower than the prefill's matmuls, so nothing mixes there (wgpu:
    /// not measured, off).
    pub fn default_mix_max(&self) -> usize {
        match self {
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => crate::DEFAULT_MIX_MAX_CUDA,
            _ => 0,
        }
    }

    /// How decode (and prefill) run on this backend: "cpu", or the CUDA paths, e.g.
    /// "persistent (132 blocks); prefill cublas f16".
    pub fn decode_path(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".into(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => format!("{}; prefill {}", m.decode_path(), m.prefill_path()),
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => "wgpu".into(),
        }
    }

    pub fn new_cache(&self, capacity: usize) -> Result<Cache, ServerError> {
        Ok(match self {
            Backend::Cpu(m) => Cache::Cpu(m.new_cache(capacity)),
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => Cache::Cuda(m.new_cache(capacity)?),
            #[cfg(feature = "gpu")]
            Backend::Gpu(m) => Cache::Gpu(m.new_cache(capacity)?),
        })
    }

    /// The KV block pool that slot caches share: on the CPU, `blocks` blocks; None on the
    /// GPU backends, whose caches stay one allocation each.
    pub fn kv_pool(&self, blocks: usize) -> Option<KvPool> {
        match self {
            Backend::Cpu(m) => Some(m.new_kv_pool(blocks)),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// A slot's cache of up to `capacity` positions: paged from `pool` when there is one.
    pub fn slot_cache(&self, capacity: usize, pool: Option<&KvPool>) -> Result<Cache, ServerError> {
        match (self, pool) {
            (Backend::Cpu(_), Some(p)) => Ok(Cache::Cpu(KvCache::paged(p, capacity))),
            _ => self.new_cache(capacity),
        }
    }

    /// Runs `tokens` after what `cache` holds; logits of the last token or of all of them.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
        which: Logits,
    ) -> Result<Vec<f32>, ServerError> {
        self.forward_with(tokens, cache, which, <[f32]>::to_vec)
    }

    /// [`forward`](Self::forward) with the logits read by `f` where they land (CUDA: in the
    /// pinned buffer of their one copy from the device, as llama.cpp reads its logits).
    pub fn forward_with<R>(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
        which: Logits,
        f: impl FnOnce(&[f32]) -> R,
    ) -> Result<R, ServerError> {
        match (self, cache) {
            (Backend::Cpu(m), Cache::Cpu(c)) => Ok(f(&m.forward(tokens, c, which)?)),
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c)) => Ok(m.forward_with(tokens, c, which, f)?),
            #[cfg(feature = "gpu")]
            (Backend::Gpu(m), Cache::Gpu(c)) => Ok(f(&m.forward(tokens, c, which)?)),
            #[allow(unreachable_patterns)]
            _ => Err(ServerError::CacheMismatch),
        }
    }
}

impl Backend {
    /// Runs `tokens` after what `cache` holds and returns the greedy pick of the last token's
    /// logits made by the backend, without sending the logits back (CUDA's `forward_pick`, with
    /// `MOLLA_CUDA_PICK=1`); None, having run nothing, where the
    /// backend does not pick: the caller then samples from [`forward_with`](Self::forward_with).
    /// Use it only for a sampler that is plain greedy (`Sampler::is_plain_greedy`).
    pub fn forward_pick(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
    ) -> Option<Result<u32, ServerError>> {
        match (self, cache) {
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c)) if cuda_pick_on() => Some(
                m.forward_pick(tokens, c)
                    .map_err(ServerError::from)
                    .and_then(pick_id),
            ),
            _ => {
                let _ = tokens;
                None
            }
        }
    }

    /// Greedy decoding chained on the backend (CUDA's `decode_greedy`: each pick stays on the
    /// device as the next step's input, so no host round trip between tokens), from `first`
    /// after what `cache` holds, for at most `max` steps: `on_pick` gets each step's pick in
    /// order and returns whether to go on (the step whose pick it refused stays in the cache).
    /// Returns the steps taken; None, having run nothing, where the backend does not chain (not
    /// CUDA, or with `MOLLA_CHAIN=0`, see `cuda::chain_on`). Use it
    /// only for a sampler that is plain greedy (`Sampler::is_plain_greedy`).
    pub fn decode_greedy(
        &self,
        first: u32,
        max: usize,
        cache: &mut Cache,
        mut on_pick: impl FnMut(Result<u32, ServerError>) -> bool,
    ) -> Option<Result<usize, ServerError>> {
        match (self, cache) {
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c)) if cuda::chain_on() => Some(
                m.decode_greedy(first, max, c, |p| on_pick(pick_id(p)))
                    .map_err(ServerError::from),
            ),
            _ => {
                let _ = (first, max, &mut on_pick);
                None
            }
        }
    }

    /// Runs `tokens` after what `cache` holds and returns the top `k` of the last token's logits
    /// (`(id, logit)`, see `cuda::TopLogits`) found by the backend, without sending the logits
    /// back (CUDA's `forward_top`, with `MOLLA_CUDA_PICK=1`); None,
    /// having run nothing, where the backend does not (or not for this `k`): the caller then
    /// samples from [`forward_with`](Self::forward_with). Use it only for the `k` of
    /// `Sampler::top_k_only`.
    pub fn forward_top(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
        k: usize,
    ) -> Option<Result<Vec<(u32, f32)>, ServerError>> {
        match (self, cache) {
            #[cfg(feature = "cuda")]
            (Backend::Cuda(m), Cache::Cuda(c))
                if cuda_pick_on() && cuda::top_k_fits(m.hparams().n_vocab, k) =>
            {
                Some(match m.forward_top(tokens, c, k) {
                    Ok(cuda::TopLogits::Top(top)) => Ok(top),
                    Ok(cuda::TopLogits::BadLogit { index, value }) => {
                        Err(sampler::SamplerError::BadLogit { index, value }.into())
                    }
                    Err(e) => Err(e.into()),
                })
            }
            _ => {
                let _ = (tokens, k);
                None
            }
        }
    }

    /// One engine step: several tokens for each of several sequences in one pass (`seqs[i].0`
    /// after what cache `seqs[i].1` holds: a decode token or a prompt chunk), `n_vocab` logits
    /// of each sequence's last token, in order, read by `f` where they land (CUDA: the pinned
    /// buffer of their one copy from the device, 12 MB a step at 64 SmolLM2 sequences, read in
    /// place). On the CPU and on CUDA one pass over the weights serves them all; a lone decode
    /// token is a plain decode step (CUDA's persistent kernel). Every token gets the bits of a
    /// single-token decode step at its position, whatever shares the pass (a chunk's logits
    /// differ from [`forward`](Self::forward)'s prefill within rounding, the same way every
    /// time). The wgpu backend runs the sequences one after another.
    pub fn forward_mixed_with<R>(
        &self,
        seqs: &mut [(&[u32], &mut Cache)],
        f: impl FnOnce(&[f32]) -> R,
    ) -> Result<R, ServerError> {
        if let [(t, cache)] = seqs
            && t.len() == 1
        {
            return self.forward_with(t, cache, Logits::Last, f);
        }
        #[allow(irrefutable_let_patterns)]
        if let Backend::Cpu(m) = self {
            let mut cpu: Vec<(&[u32], &mut KvCache)> = Vec::with_capacity(seqs.len());
            for (t, c) in seqs.iter_mut() {
                match c {
                    Cache::Cpu(kv) => cpu.push((t, kv)),
                    #[allow(unreachable_patterns)]
                    _ => return Err(ServerError::CacheMismatch),
                }
            }
            return Ok(f(&m.forward_mixed(&mut cpu)?));
        }
        #[cfg(feature = "cuda")]
        if let Backend::Cuda(m) = self {
            let mut cuda: Vec<(&[u32], &mut cuda::CudaKvCache)> = Vec::with_capacity(seqs.len());
            for (t, c) in seqs.iter_mut() {
                match c {
                    Cache::Cuda(kv) => cuda.push((t, kv)),
                    #[allow(unreachable_patterns)]
                    _ => return Err(ServerError::CacheMismatch),
                }
            }
            return Ok(m.forward_mixed_with(&mut cuda, f)?);
        }
        let mut out = Vec::new();
        for (t, cache) in seqs.iter_mut() {
            out.extend(self.forward(t, cache, Logits::Last)?);
        }
        Ok(f(&out))
    }

    /// The final hidden states after the output norm, `n_embd` per token, of `tokens` run in a
    /// fresh cache: on the CPU whichever backend generates (the GPU backends keep the CPU model
    /// of the same file for it), so embeddings are the CPU's, bit for bit.
    pub fn hidden_states(&self, tokens: &[u32]) -> Result<Vec<f32>, ServerError> {
        match self {
            Backend::Cpu(m) => {
                let mut kv = m.new_cache(tokens.len());
                Ok(m.hidden_states(tokens, &mut kv)?)
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(m) => m.cpu_hidden_states(tokens),
            #[cfg(feature = "gpu")]
            Backend::Gpu(m) => m.cpu_hidden_states(tokens),
        }
    }
}

impl Cache {
    /// KV blocks the cache holds (a paged CPU cache; 0 otherwise).
    pub fn blocks(&self) -> usize {
        match self {
            Cache::Cpu(c) => c.blocks(),
            #[allow(unreachable_patterns)]
            _ => 0,
        }
    }

    /// Starts this cache (emptied) with the first `n` positions of `src` by sharing its KV
    /// blocks (paged CPU caches of one pool, `n` whole blocks); false and unchanged otherwise.
    pub fn share_prefix(&mut self, src: &Cache, n: usize) -> bool {
        match (self, src) {
            (Cache::Cpu(d), Cache::Cpu(s)) => d.share_prefix(s, n),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    pub fn clear(&mut self) {
        match self {
            Cache::Cpu(c) => c.clear(),
            #[cfg(feature = "cuda")]
            Cache::Cuda(c) => c.clear(),
            #[cfg(feature = "gpu")]
            Cache::Gpu(c) => c.clear(),
        }
    }

    /// Forgets every position from `len` on (keeps the first `len`).
    pub fn truncate(&mut self, len: usize) {
        match self {
            Cache::Cpu(c) => c.truncate(len),
            #[cfg(feature = "cuda")]
            Cache::Cuda(c) => c.len = c.len.min(len),
            #[cfg(feature = "gpu")]
            Cache::Gpu(c) => c.len = c.len.min(len),
        }
    }

    /// How many tokens the cache holds.
    pub fn len(&self) -> usize {
        match self {
            Cache::Cpu(c) => c.len,
            #[cfg(feature = "cuda")]
            Cache::Cuda(c) => c.len,
            #[cfg(feature = "gpu")]
            Cache::Gpu(c) => c.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A CUDA greedy pick as the host sampler would answer: the token, or its error.
#[cfg(feature = "cuda")]
fn pick_id(p: cuda::Pick) -> Result<u32, ServerError> {
    match p {
        cuda::Pick::Token(id) => Ok(id),
        cuda::Pick::BadLogit { index, value } => {
            Err(sampler::SamplerError::BadLogit { index, value }.into())
        }
        cuda::Pick::NoCandidates => Err(sampler::SamplerError::NoCandidates.into()),
    }
}

/// Whether CUDA makes the greedy pick and the top-k candidates on the device (`MOLLA_CUDA_PICK=1`;
/// read once). Off by default: on the H200 neither was faster than copying the logits back
/// (docs/cuda-persistent.md, session 11).
#[cfg(feature = "cuda")]
fn cuda_pick_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_CUDA_PICK").is_ok_and(|v| v == "1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(arch: &'static str) -> Model {
        let bytes = model::synth::build(&model::synth::SynthSpec::tiny(arch)).unwrap();
        Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap()).unwrap()
    }

    /// `auto` sends a family CUDA does not run to the CPU; an explicit device is kept, and the
    /// backend then refuses the model with a reason rather than running it wrongly. Every family
    /// runs on CUDA now, so a gemma3 spec with the flag off stands for one that does not.
    #[test]
    fn auto_runs_a_family_cuda_lacks_on_the_cpu() {
        let (mut gemma, llama) = (model("gemma3"), model("llama"));
        assert_eq!(device_for(&gemma, Device::Cuda(0), true), Device::Cuda(0));
        gemma.arch.cuda = false;
        assert_eq!(device_for(&gemma, Device::Cuda(0), true), Device::Cpu);
        assert_eq!(device_for(&gemma, Device::Gpu, true), Device::Gpu);
        assert_eq!(device_for(&gemma, Device::Cuda(0), false), Device::Cuda(0));
        assert_eq!(device_for(&llama, Device::Cuda(0), true), Device::Cuda(0));
        match Backend::new(gemma, Device::Cuda(0)) {
            Ok(_) => panic!("a model of a family CUDA lacks loaded on CUDA"),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("gemma3") || msg.contains("CUDA") || msg.contains("cuda"),
                    "{msg}"
                );
            }
        }
    }
}
