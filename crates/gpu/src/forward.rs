//! The forward pass of a llama-family decoder on a wgpu device. A cache carries its own scratch
//! buffers and every dispatch of a step already bound to them, so a step is: write the step's
//! token ids and (n, start), record the dispatch list into one compute pass, submit, and read
//! back only the logits. Prefill runs chunks of up to 64 tokens through the same shaders (the
//! matvec takes 8 tokens per weight read).

use crate::device::Gpu;
use crate::error::{GpuError, Result};
use crate::kernels::{self, DevMatrix, Dispatch, Heads, KvLayer, MatvecOpts};
use cpu::Logits;
use model::{HParams, Model};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most tokens a step runs at once.
const MAX_CHUNK: usize = 64;

struct DevLayer {
    attn_norm: wgpu::Buffer,
    wq: DevMatrix,
    wk: DevMatrix,
    wv: DevMatrix,
    bq: Option<wgpu::Buffer>,
    bk: Option<wgpu::Buffer>,
    bv: Option<wgpu::Buffer>,
    q_norm: Option<wgpu::Buffer>,
    k_norm: Option<wgpu::Buffer>,
    wo: DevMatrix,
    post_attn_norm: Option<wgpu::Buffer>,
    ffn_norm: wgpu::Buffer,
    w_gate: DevMatrix,
    w_up: DevMatrix,
    w_down: DevMatrix,
    post_ffn_norm: Option<wgpu::Buffer>,
}

/// A model whose weights live on a wgpu device, with the same contract as `cpu::CpuModel`.
pub struct GpuModel {
    gpu: Gpu,
    hp: HParams,
    heads: Heads,
    rope: cpu::ops::Rope,
    /// The rope of sliding-window layers, when the model has any.
    rope_swa: Option<cpu::ops::Rope>,
    embd: DevMatrix,
    /// `None` when the output head is tied to the embedding.
    output: Option<DevMatrix>,
    output_norm: wgpu::Buffer,
    layers: Vec<DevLayer>,
    /// Bound where a matvec has no bias.
    dummy: wgpu::Buffer,
    uid: u64,
    cache_f16: bool,
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A sequence's KV cache on the device, with the scratch buffers and bound dispatches of a step.
pub struct GpuKvCache {
    /// Positions filled so far.
    pub len: usize,
    capacity: usize,
    chunk: usize,
    model_uid: u64,
    step: wgpu::Buffer,
    tokens: wgpu::Buffer,
    logits: wgpu::Buffer,
    body: Vec<Dispatch>,
    tail_last: Vec<Dispatch>,
    tail_all: Vec<Dispatch>,
    /// Keeps every buffer the dispatches use alive (wgpu would too; this makes it plain).
    _buffers: Vec<wgpu::Buffer>,
}

impl GpuKvCache {
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

fn check_shape(hp: &HParams) -> Result<()> {
    if !hp.head_dim.is_multiple_of(2) || !hp.head_dim_v.is_multiple_of(2) {
        return Err(GpuError::Unsupported(format!(
            "odd head widths {}/{}",
            hp.head_dim, hp.head_dim_v
        )));
    }
    Ok(())
}

impl GpuModel {
    /// Opens the preferred adapter and uploads the weights of `model` in their GGUF block
    /// layout. Fails with a one-line error when there is no adapter, or when a tensor type or
    /// shape is not supported.
    pub fn new(model: &Model) -> Result<GpuModel> {
        GpuModel::with_gpu(Gpu::new()?, model)
    }

    /// Like [`GpuModel::new`] on an opened device.
    pub fn with_gpu(gpu: Gpu, model: &Model) -> Result<GpuModel> {
        if !model.arch.wgpu {
            return Err(GpuError::Unsupported(format!(
                "the {} architecture (it runs on the CPU: --device cpu)",
                model.arch.name
            )));
        }
        let hp = model.hp.clone();
        check_shape(&hp)?;
        let f = &model.file;
        let m = |w: &model::Matrix| DevMatrix::new(&gpu, &w.name, w.ty, w.rows, w.cols, w.bytes(f));
        let v = |name: &str, x: &[f32]| gpu.upload_f32(name, x);
        let ov = |x: &Option<Vec<f32>>| {
            x.as_deref()
                .map(|x| gpu.upload_f32("vector", x))
                .transpose()
        };
        let mut layers = Vec::with_capacity(model.layers.len());
        for l in &model.layers {
            layers.push(DevLayer {
                attn_norm: v("attn_norm", &l.attn_norm)?,
                wq: m(&l.wq)?,
                wk: m(&l.wk)?,
                wv: m(&l.wv)?,
                bq: ov(&l.bq)?,
                bk: ov(&l.bk)?,
                bv: ov(&l.bv)?,
                q_norm: ov(&l.q_norm)?,
                k_norm: ov(&l.k_norm)?,
                wo: m(&l.wo)?,
                post_attn_norm: ov(&l.post_attn_norm)?,
                ffn_norm: v("ffn_norm", &l.ffn_norm)?,
                w_gate: m(&l.w_gate)?,
                w_up: m(&l.w_up)?,
                w_down: m(&l.w_down)?,
                post_ffn_norm: ov(&l.post_ffn_norm)?,
            });
        }
        let out = GpuModel {
            embd: m(&model.tok_embd)?,
            output: if model.tied_output {
                None
            } else {
                Some(m(&model.output)?)
            },
            output_norm: v("output_norm", &model.output_norm)?,
            dummy: gpu.storage("dummy", 4)?,
            layers,
            heads: Heads::from_hparams(&hp),
            rope: cpu::ops::Rope::new(&hp, model.rope_freqs.as_deref()),
            rope_swa: cpu::ops::Rope::sliding(&hp),
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            cache_f16: false,
            hp,
            gpu,
        };
        out.gpu.check()?;
        Ok(out)
    }

    /// The adapter's name and API.
    pub fn device_name(&self) -> String {
        self.gpu.name()
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    /// Whether caches made from now on hold f16 (half the memory) instead of f32 (the default).
    pub fn set_cache_f16(&mut self, f16: bool) {
        self.cache_f16 = f16;
    }

    /// A KV cache for `capacity` positions, with its scratch buffers and bound dispatches.
    pub fn new_cache(&self, capacity: usize) -> Result<GpuKvCache> {
        let (g, hp, h) = (&self.gpu, &self.hp, self.heads);
        let max = g.limits.max_storage_buffer_binding_size as usize;
        let per_pos = h.n_head * capacity * 4;
        if capacity == 0 || per_pos > max || capacity > u32::MAX as usize / hp.kv_dim().max(1) {
            return Err(GpuError::Unsupported(format!(
                "KV cache capacity {capacity}"
            )));
        }
        let chunk = MAX_CHUNK
            .min(capacity)
            .min(max / per_pos)
            .min(max / (hp.n_vocab * 4).max(1))
            .max(1);
        let f32s = |name: &str, n: usize| g.storage(name, (n * 4) as u64);
        let step = g.uniform("step", &[0, 0, 0, 0]);
        let tokens = g.storage("tokens", (chunk * 4) as u64)?;
        let x = f32s("x", chunk * hp.n_embd)?;
        let hb = f32s("h", chunk * hp.n_embd)?;
        let q = f32s("q", chunk * hp.q_dim())?;
        let k = f32s("k", chunk * hp.kv_dim())?;
        let v = f32s("v", chunk * hp.v_dim())?;
        let att = f32s("att", chunk * h.n_head * h.head_dim_v)?;
        let gate = f32s("gate", chunk * hp.n_ff)?;
        let up = f32s("up", chunk * hp.n_ff)?;
        let scores = f32s("scores", chunk * h.n_head * capacity)?;
        let last = f32s("last", hp.n_embd)?;
        let logits = f32s("logits", chunk * hp.n_vocab)?;
        let table = g.upload_f32("rope table", &kernels::rope_table(&self.rope, capacity))?;
        let table_swa = match &self.rope_swa {
            Some(r) => g.upload_f32("rope table", &kernels::rope_table(r, capacity))?,
            None => g.storage("no rope table", 4)?,
        };
        // q/k after their per-head norms (qwen3, gemma3) and a post-normed output before its
        // add (gemma): one float where the model has no such norms.
        let sized = |on: bool, n: usize| if on { chunk * n } else { 1 };
        let qk_norms = self.layers.iter().any(|l| l.q_norm.is_some());
        let post_norms = self.layers.iter().any(|l| l.post_attn_norm.is_some());
        let qn = f32s("q normed", sized(qk_norms, hp.q_dim()))?;
        let kn = f32s("k normed", sized(qk_norms, hp.kv_dim()))?;
        let h2 = f32s("h post-normed", sized(post_norms, hp.n_embd))?;
        let per = if self.cache_f16 { 2 } else { 4 };
        let mut caches = Vec::with_capacity(2 * hp.n_layer);
        for _ in 0..hp.n_layer {
            caches.push(g.storage("k cache", (capacity * hp.kv_dim() * per) as u64)?);
            caches.push(g.storage("v cache", (capacity * hp.v_dim() * per) as u64)?);
        }
        let eps = hp.rms_eps;
        let e = hp.n_embd;
        let dm = &self.dummy;
        let mv = |w: &DevMatrix, x: &wgpu::Buffer, y: &wgpu::Buffer, o: MatvecOpts| {
            kernels::matvec(g, w, x, y, &step, dm, o)
        };
        let acc = MatvecOpts {
            accumulate: true,
            ..Default::default()
        };
        fn bias(b: &Option<wgpu::Buffer>) -> MatvecOpts<'_> {
            MatvecOpts {
                bias: b.as_ref(),
                ..Default::default()
            }
        }
        let mut body = kernels::embed(g, &self.embd, &tokens, &x, &step)?;
        if let Some(s) = hp.embd_scale {
            body.push(kernels::scale(g, &x, &step, (e, false), s)?);
        }
        // The projection of `input` by `w` added onto x: straight into x, or through a scratch
        // row, normed by `post` (gemma) and scaled by the residual scale (granite) first.
        let project = |w: &DevMatrix, input: &wgpu::Buffer, post: &Option<wgpu::Buffer>| {
            if post.is_none() && hp.residual_scale.is_none() {
                return mv(w, input, &x, acc);
            }
            let mut d = mv(w, input, &hb, MatvecOpts::default())?;
            let out = match post {
                Some(pw) => {
                    d.push(kernels::rms_norm(g, &hb, pw, &h2, &step, e, eps, false)?);
                    &h2
                }
                None => &hb,
            };
            if let Some(s) = hp.residual_scale {
                d.push(kernels::scale(g, out, &step, (e, false), s)?);
            }
            d.push(kernels::elementwise(g, "add", &x, out, &step, e)?);
            Ok(d)
        };
        for (li, l) in self.layers.iter().enumerate() {
            let window = hp.window(li).unwrap_or(0);
            let kv = KvLayer {
                k: &caches[2 * li],
                v: &caches[2 * li + 1],
                f16: self.cache_f16,
                capacity,
                window,
            };
            body.push(kernels::rms_norm(
                g,
                &x,
                &l.attn_norm,
                &hb,
                &step,
                e,
                eps,
                false,
            )?);
            body.extend(mv(&l.wq, &hb, &q, bias(&l.bq))?);
            body.extend(mv(&l.wk, &hb, &k, bias(&l.bk))?);
            body.extend(mv(&l.wv, &hb, &v, bias(&l.bv))?);
            let (qa, ka) = match (&l.q_norm, &l.k_norm) {
                (Some(qw), Some(kw)) => {
                    let hd = hp.head_dim;
                    body.push(kernels::heads_norm(
                        g,
                        &q,
                        (qw, hd),
                        &qn,
                        &step,
                        hp.n_head,
                        eps,
                    )?);
                    body.push(kernels::heads_norm(
                        g,
                        &k,
                        (kw, hd),
                        &kn,
                        &step,
                        hp.n_head_kv,
                        eps,
                    )?);
                    (&qn, &kn)
                }
                _ => (&q, &k),
            };
            let tab = if window > 0 { &table_swa } else { &table };
            if hp.ropes(li) {
                body.push(kernels::rope(g, h, qa, ka, tab, &step)?);
            }
            body.push(kernels::kv_store(g, h, &kv, ka, &v, &step)?);
            body.push(kernels::attention(g, h, &kv, qa, &scores, &att, &step)?);
            body.extend(project(&l.wo, &att, &l.post_attn_norm)?);
            body.push(kernels::rms_norm(
                g,
                &x,
                &l.ffn_norm,
                &hb,
                &step,
                e,
                eps,
                false,
            )?);
            body.extend(mv(&l.w_gate, &hb, &gate, MatvecOpts::default())?);
            body.extend(mv(&l.w_up, &hb, &up, MatvecOpts::default())?);
            let glu = match hp.ffn_act {
                model::FfnAct::Silu => "swiglu",
                model::FfnAct::GeluTanh => "geglu",
            };
            body.push(kernels::elementwise(g, glu, &gate, &up, &step, hp.n_ff)?);
            body.extend(project(&l.w_down, &gate, &l.post_ffn_norm)?);
        }
        let head = self.output.as_ref().unwrap_or(&self.embd);
        // The head: the last row's logits (`single`) or every row's, then what the family does
        // to them (granite's logit scale, gemma2's soft-capping).
        let tail = |single: bool| -> Result<Vec<Dispatch>> {
            let normed = if single { &last } else { &hb };
            let norm = kernels::rms_norm(g, &x, &self.output_norm, normed, &step, e, eps, single)?;
            let mut d = vec![norm];
            let o = MatvecOpts {
                single,
                ..Default::default()
            };
            d.extend(mv(head, normed, &logits, o)?);
            if let Some(s) = hp.logit_mul {
                d.push(kernels::scale(g, &logits, &step, (hp.n_vocab, single), s)?);
            }
            if let Some(c) = hp.final_softcap {
                d.push(kernels::softcap(g, &logits, &step, hp.n_vocab, single, c)?);
            }
            Ok(d)
        };
        let (tail_last, tail_all) = (tail(true)?, tail(false)?);
        g.check()?;
        let mut buffers = vec![x, hb, q, k, v, att, gate, up, scores, last, table];
        buffers.extend([table_swa, qn, kn, h2]);
        buffers.extend(caches);
        Ok(GpuKvCache {
            len: 0,
            capacity,
            chunk,
            model_uid: self.uid,
            step,
            tokens,
            logits,
            body,
            tail_last,
            tail_all,
            _buffers: buffers,
        })
    }

    /// Runs `tokens` at positions `kv.len..`, appends their keys and values to `kv`, and returns
    /// logits: `n_vocab` values for the last token, or for every token with [`Logits::All`].
    pub fn forward(&self, tokens: &[u32], kv: &mut GpuKvCache, which: Logits) -> Result<Vec<f32>> {
        if kv.model_uid != self.uid {
            return Err(GpuError::CacheShape);
        }
        cpu::check_input(tokens, kv.len, kv.capacity, self.hp.n_vocab)?;
        let count = tokens.len().div_ceil(kv.chunk);
        let mut out = Vec::new();
        for (i, chunk) in tokens.chunks(kv.chunk).enumerate() {
            let want = match which {
                Logits::All => Some(Logits::All),
                Logits::Last => (i + 1 == count).then_some(Logits::Last),
            };
            if let Some(l) = self.step(chunk, kv, want)? {
                out.extend(l);
            }
        }
        Ok(out)
    }

    fn step(
        &self,
        tokens: &[u32],
        kv: &mut GpuKvCache,
        want: Option<Logits>,
    ) -> Result<Option<Vec<f32>>> {
        let g = &self.gpu;
        let n = tokens.len();
        let fields = [n as u32, kv.len as u32, 0, 0];
        g.queue
            .write_buffer(&kv.step, 0, bytemuck::cast_slice(&fields));
        g.queue
            .write_buffer(&kv.tokens, 0, bytemuck::cast_slice(tokens));
        let mut enc = g
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step"),
            });
        let tail: &[Dispatch] = match want {
            Some(Logits::Last) => &kv.tail_last,
            Some(Logits::All) => &kv.tail_all,
            None => &[],
        };
        kernels::encode(&mut enc, &[&kv.body, tail], n as u32);
        let rows = match want {
            Some(Logits::Last) => 1,
            Some(Logits::All) => n,
            None => 0,
        };
        let out = if rows > 0 {
            let bytes = (rows * self.hp.n_vocab * 4) as u64;
            Some(g.submit_read(enc, &kv.logits, bytes)?)
        } else {
            g.submit(enc)?;
            None
        };
        kv.len += n;
        Ok(out)
    }
}
