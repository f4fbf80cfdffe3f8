//! One dispatch of one shader, bound to its buffers once and replayed every step: the builders
//! here make them (matvec, embed, RMSNorm, RoPE, KV store, attention, SwiGLU, add), and
//! [`encode`] records a list of them into one compute pass for a step of `n` tokens.

use crate::device::{Gpu, grid, rows_grid};
use crate::error::{GpuError, Result};
use crate::shaders;
use gguf::GgmlType;

/// Tokens a matvec workgroup takes at once (`TT` in matvec.wgsl).
const TOKENS_PER_GROUP: u32 = 8;
/// Rows a matvec workgroup takes (`ROWS` in matvec.wgsl).
const ROWS_PER_GROUP: u32 = 8;

/// How many workgroups a dispatch needs for a step of `n` tokens.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grid {
    /// One workgroup per row and per 8 tokens (or for the one token).
    Rows { rows: u32, single: bool },
    /// One workgroup per token, or one in all.
    PerToken { single: bool },
    /// `per_token` threads for each token, in groups of 64.
    Threads { per_token: u32 },
    /// `threads` threads, whatever the step's `n`, in groups of 64.
    Fixed { threads: u32 },
    /// One workgroup per (head, token).
    Heads { n_head: u32 },
}

impl Grid {
    fn counts(self, n: u32) -> (u32, u32, u32) {
        match self {
            Grid::Rows { rows, single } => {
                let (x, y) = rows_grid(rows.div_ceil(ROWS_PER_GROUP));
                let z = if single || n == 1 {
                    1
                } else {
                    n.div_ceil(TOKENS_PER_GROUP)
                };
                (x, y, z)
            }
            Grid::PerToken { single } => (if single { 1 } else { n }, 1, 1),
            Grid::Threads { per_token } => {
                let (x, y) = grid(per_token * n);
                (x, y, 1)
            }
            Grid::Fixed { threads } => {
                let (x, y) = grid(threads);
                (x, y, 1)
            }
            Grid::Heads { n_head } => (n_head, n, 1),
        }
    }
}

/// A pipeline with its bind group and grid.
pub(crate) struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    /// The one-token form and its bind group (auto layouts are per pipeline), used when the
    /// step has one token (matvec1 for matvec).
    pipeline1: Option<(wgpu::ComputePipeline, wgpu::BindGroup)>,
    bind: wgpu::BindGroup,
    grid: Grid,
    /// Kept alive with the bind group.
    _params: Option<wgpu::Buffer>,
}

/// Records `list` for a step of `n` tokens into one compute pass of `encoder`.
pub(crate) fn encode(encoder: &mut wgpu::CommandEncoder, list: &[&[Dispatch]], n: u32) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: None,
        timestamp_writes: None,
    });
    for d in list.iter().flat_map(|l| l.iter()) {
        let (x, y, z) = d.grid.counts(n);
        let single = matches!(d.grid, Grid::Rows { single: true, .. });
        match &d.pipeline1 {
            Some((p, b)) if n == 1 || single => {
                pass.set_pipeline(p);
                pass.set_bind_group(0, b, &[]);
            }
            _ => {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind, &[]);
            }
        }
        pass.dispatch_workgroups(x, y, z);
    }
}

/// Rows `row0..row0 + rows` of a matrix, in one buffer.
pub(crate) struct Part {
    buf: wgpu::Buffer,
    row0: usize,
    rows: usize,
}

/// A weight matrix on the device, in its GGUF block layout: one buffer, or several row ranges
/// when it is larger than the adapter can bind at once (Qwen's 151936-row output head is
/// 144 MB; many adapters bind at most 128 MiB).
pub struct DevMatrix {
    parts: Vec<Part>,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

impl DevMatrix {
    /// Uploads `rows` rows of `cols` elements of type `ty` (`bytes`: the whole tensor).
    pub fn new(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<DevMatrix> {
        DevMatrix::in_parts(gpu, name, ty, (rows, cols), bytes, usize::MAX)
    }

    /// Like [`DevMatrix::new`], in parts of at most `part_rows` rows (fewer when the adapter's
    /// binding limit asks for it).
    pub fn in_parts(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        bytes: &[u8],
        part_rows: usize,
    ) -> Result<DevMatrix> {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .and_then(|b| usize::try_from(b).ok())
            .filter(|_| rows > 0)
            .ok_or_else(|| GpuError::Unsupported(format!("tensor '{name}' shape")))?;
        if !shaders::supports(ty) {
            return Err(GpuError::Unsupported(format!(
                "tensor '{name}' of type {ty}"
            )));
        }
        if !cols.is_multiple_of(8) || bytes.len() != rows * row_bytes {
            return Err(GpuError::Unsupported(format!(
                "tensor '{name}': {rows}x{cols} (rows must hold a multiple of 8 elements)"
            )));
        }
        let bind_max = gpu
            .limits
            .max_storage_buffer_binding_size
            .min(gpu.limits.max_buffer_size)
            .min(u32::MAX as u64) as usize;
        let per_part = (bind_max.saturating_sub(8) / row_bytes)
            .min(rows)
            .min(part_rows);
        if per_part == 0 {
            return Err(GpuError::Unsupported(format!(
                "tensor '{name}': a row of {row_bytes} bytes (the adapter binds at most {bind_max})"
            )));
        }
        let mut parts = Vec::with_capacity(rows.div_ceil(per_part));
        for row0 in (0..rows).step_by(per_part) {
            let n = per_part.min(rows - row0);
            let part = &bytes[row0 * row_bytes..(row0 + n) * row_bytes];
            parts.push(Part {
                buf: gpu.upload_bytes(name, part)?,
                row0,
                rows: n,
            });
        }
        Ok(DevMatrix {
            parts,
            ty,
            rows,
            cols,
            row_bytes,
        })
    }

    fn pipeline(&self, gpu: &Gpu, entry: &str) -> Result<wgpu::ComputePipeline> {
        let ty = self.ty;
        let key = format!("matvec_{ty}");
        gpu.pipeline(&key, entry, || shaders::matvec(ty).unwrap_or_default())
    }

    fn params(&self, gpu: &Gpu, part: &Part, flags: u32) -> wgpu::Buffer {
        gpu.uniform(
            "matvec params",
            &[
                part.rows as u32,
                self.cols as u32,
                self.row_bytes as u32,
                flags,
                part.row0 as u32,
                self.rows as u32,
            ],
        )
    }
}

/// What a matvec adds to the product.
#[derive(Clone, Copy, Default)]
pub(crate) struct MatvecOpts<'a> {
    pub bias: Option<&'a wgpu::Buffer>,
    /// Add to what the output holds (the residual stream).
    pub accumulate: bool,
    /// Only one input row, whatever the step's `n`.
    pub single: bool,
}

/// `y[t] = w · x[t] (+ bias) (+ y[t])` for the step's tokens: one dispatch per part of `w`.
pub(crate) fn matvec(
    gpu: &Gpu,
    w: &DevMatrix,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    step: &wgpu::Buffer,
    dummy: &wgpu::Buffer,
    o: MatvecOpts,
) -> Result<Vec<Dispatch>> {
    let flags =
        u32::from(o.bias.is_some()) | (u32::from(o.accumulate) << 1) | (u32::from(o.single) << 2);
    let pipeline = w.pipeline(gpu, "matvec")?;
    let pipeline1 = w.pipeline(gpu, "matvec1")?;
    let bias = o.bias.unwrap_or(dummy);
    Ok(w.parts
        .iter()
        .map(|part| {
            let params = w.params(gpu, part, flags);
            let entries = [
                (0, &part.buf),
                (1, &params),
                (2, step),
                (3, x),
                (4, y),
                (5, bias),
            ];
            let bind = gpu.bind(&pipeline, &entries);
            let bind1 = gpu.bind(&pipeline1, &entries);
            Dispatch {
                pipeline: pipeline.clone(),
                pipeline1: Some((pipeline1.clone(), bind1)),
                bind,
                grid: Grid::Rows {
                    rows: part.rows as u32,
                    single: o.single,
                },
                _params: Some(params),
            }
        })
        .collect())
}

/// `y[t] = w[tokens[t]]` (rows dequantized to f32): one dispatch per part of `w`.
pub(crate) fn embed(
    gpu: &Gpu,
    w: &DevMatrix,
    tokens: &wgpu::Buffer,
    y: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Vec<Dispatch>> {
    let pipeline = w.pipeline(gpu, "embed")?;
    Ok(w.parts
        .iter()
        .map(|part| {
            let params = w.params(gpu, part, 0);
            let bind = gpu.bind(
                &pipeline,
                &[(0, &part.buf), (1, &params), (2, step), (4, y), (6, tokens)],
            );
            Dispatch {
                pipeline: pipeline.clone(),
                pipeline1: None,
                bind,
                grid: Grid::Threads {
                    per_token: (w.cols / 8) as u32,
                },
                _params: Some(params),
            }
        })
        .collect())
}

/// RMSNorm of the step's rows of `cols` (or of its last row only, into row 0).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    g: &wgpu::Buffer,
    y: &wgpu::Buffer,
    step: &wgpu::Buffer,
    cols: usize,
    eps: f32,
    last_only: bool,
) -> Result<Dispatch> {
    let params = [cols as u32, eps.to_bits(), u32::from(last_only), 0];
    let grid = Grid::PerToken { single: last_only };
    norm(gpu, [x, g, y, step], params, grid)
}

/// RMSNorm of each of the step's rows' `heads` heads of `g.len()` values (gemma's q/k norms).
pub(crate) fn heads_norm(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    (g, width): (&wgpu::Buffer, usize),
    y: &wgpu::Buffer,
    step: &wgpu::Buffer,
    heads: usize,
    eps: f32,
) -> Result<Dispatch> {
    let params = [width as u32, eps.to_bits(), 0, heads as u32];
    let grid = Grid::Heads {
        n_head: heads as u32,
    };
    norm(gpu, [x, g, y, step], params, grid)
}

/// The RMSNorm shader bound to `[x, g, y, step]` with `params` (rms_norm.wgsl's NormParams).
fn norm(
    gpu: &Gpu,
    [x, g, y, step]: [&wgpu::Buffer; 4],
    params: [u32; 4],
    grid: Grid,
) -> Result<Dispatch> {
    let pipeline = gpu.pipeline("rms_norm", "rms_norm", || shaders::RMS_NORM.into())?;
    let params = gpu.uniform("norm params", &params);
    let bind = gpu.bind(
        &pipeline,
        &[(0, &params), (1, step), (2, x), (3, g), (4, y)],
    );
    Ok(Dispatch {
        pipeline,
        pipeline1: None,
        bind,
        grid,
        _params: Some(params),
    })
}

/// Head shapes for RoPE and attention.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub neox: bool,
    /// Scores are q.k times this.
    pub scale: f32,
    /// Scores become `c * tanh(s / c)` after the scale, when set (gemma2).
    pub softcap: Option<f32>,
}

impl Heads {
    pub fn from_hparams(hp: &model::HParams) -> Heads {
        Heads {
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            head_dim_v: hp.head_dim_v,
            n_rot: hp.n_rot,
            neox: hp.rope_style == model::RopeStyle::Neox,
            scale: hp.attn_scale,
            softcap: hp.attn_softcap,
        }
    }
}

/// RoPE of the step's query and key rows in place; `table`: (cos, sin) per position and pair.
pub(crate) fn rope(
    gpu: &Gpu,
    h: Heads,
    q: &wgpu::Buffer,
    k: &wgpu::Buffer,
    table: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = gpu.pipeline("rope", "rope", || shaders::ROPE.into())?;
    let params = gpu.uniform(
        "rope params",
        &[
            h.n_head as u32,
            h.n_head_kv as u32,
            h.head_dim as u32,
            h.n_rot as u32,
            u32::from(h.neox),
        ],
    );
    let bind = gpu.bind(
        &pipeline,
        &[(0, &params), (1, step), (2, q), (3, k), (4, table)],
    );
    Ok(Dispatch {
        pipeline,
        pipeline1: None,
        bind,
        grid: Grid::Threads {
            per_token: ((h.n_head + h.n_head_kv) * (h.n_rot / 2)) as u32,
        },
        _params: Some(params),
    })
}

/// The (cos, sin) table of RoPE for positions `0..capacity`, in f64 as the CPU backend does.
pub fn rope_table(rope: &cpu::ops::Rope, capacity: usize) -> Vec<f32> {
    let mut t = Vec::with_capacity(capacity * rope.freqs.len() * 2);
    for pos in 0..capacity {
        for &f in &rope.freqs {
            let a = pos as f64 * f;
            t.push(a.cos() as f32);
            t.push(a.sin() as f32);
        }
    }
    t
}

/// The KV cache buffers of one layer.
pub(crate) struct KvLayer<'a> {
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub f16: bool,
    pub capacity: usize,
    /// The layer attends over the last `window` positions only (0: over all).
    pub window: usize,
}

fn attn_params(gpu: &Gpu, h: Heads, kv: &KvLayer) -> wgpu::Buffer {
    gpu.uniform(
        "attention params",
        &[
            h.n_head as u32,
            (h.n_head / h.n_head_kv) as u32,
            h.head_dim as u32,
            h.head_dim_v as u32,
            (h.n_head_kv * h.head_dim) as u32,
            (h.n_head_kv * h.head_dim_v) as u32,
            kv.capacity as u32,
            h.scale.to_bits(),
            kv.window.min(u32::MAX as usize) as u32,
            h.softcap.unwrap_or(0.0).to_bits(),
        ],
    )
}

fn attn_pipeline(gpu: &Gpu, f16: bool, entry: &str) -> Result<wgpu::ComputePipeline> {
    let key = if f16 {
        "attention_f16"
    } else {
        "attention_f32"
    };
    gpu.pipeline(key, entry, || shaders::attention(f16))
}

/// Writes the step's new keys and values into the cache at positions `start..start + n`.
pub(crate) fn kv_store(
    gpu: &Gpu,
    h: Heads,
    kv: &KvLayer,
    k_new: &wgpu::Buffer,
    v_new: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = attn_pipeline(gpu, kv.f16, "store")?;
    let params = attn_params(gpu, h, kv);
    let bind = gpu.bind(
        &pipeline,
        &[
            (0, &params),
            (1, step),
            (3, kv.k),
            (4, kv.v),
            (7, k_new),
            (8, v_new),
        ],
    );
    let widest = (h.n_head_kv * h.head_dim.max(h.head_dim_v)) as u32;
    Ok(Dispatch {
        pipeline,
        pipeline1: None,
        bind,
        grid: Grid::Threads {
            per_token: if kv.f16 { widest / 2 } else { widest },
        },
        _params: Some(params),
    })
}

/// Causal attention of the step's queries over the cache (which already holds their keys).
pub(crate) fn attention(
    gpu: &Gpu,
    h: Heads,
    kv: &KvLayer,
    q: &wgpu::Buffer,
    scores: &wgpu::Buffer,
    out: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = attn_pipeline(gpu, kv.f16, "attention")?;
    let params = attn_params(gpu, h, kv);
    let bind = gpu.bind(
        &pipeline,
        &[
            (0, &params),
            (1, step),
            (2, q),
            (3, kv.k),
            (4, kv.v),
            (5, scores),
            (6, out),
        ],
    );
    Ok(Dispatch {
        pipeline,
        pipeline1: None,
        bind,
        grid: Grid::Heads {
            n_head: h.n_head as u32,
        },
        _params: Some(params),
    })
}

/// `a = silu(a) * b` (`entry` "swiglu"), `a = gelu_tanh(a) * b` ("geglu") or `a += b` ("add")
/// over the step's rows of `cols`.
pub(crate) fn elementwise(
    gpu: &Gpu,
    entry: &str,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    step: &wgpu::Buffer,
    cols: usize,
) -> Result<Dispatch> {
    ew(gpu, entry, a, Some(b), step, (cols, false), 0.0)
}

/// `a = cap * tanh(a / cap)` over the step's rows of `cols`, or over one row (`single`: the
/// last token's logits) (gemma2's final soft-capping).
pub(crate) fn softcap(
    gpu: &Gpu,
    a: &wgpu::Buffer,
    step: &wgpu::Buffer,
    cols: usize,
    single: bool,
    cap: f32,
) -> Result<Dispatch> {
    ew(gpu, "softcap", a, None, step, (cols, single), cap)
}

/// `a *= factor` over the step's rows of `cols`, or over one row (`single`: the last token's
/// logits) (gemma's and granite's embedding scale, granite's residual and logit scales).
pub(crate) fn scale(
    gpu: &Gpu,
    a: &wgpu::Buffer,
    step: &wgpu::Buffer,
    (cols, single): (usize, bool),
    factor: f32,
) -> Result<Dispatch> {
    ew(gpu, "scale", a, None, step, (cols, single), factor)
}

fn ew(
    gpu: &Gpu,
    entry: &str,
    a: &wgpu::Buffer,
    b: Option<&wgpu::Buffer>,
    step: &wgpu::Buffer,
    (cols, single): (usize, bool),
    factor: f32,
) -> Result<Dispatch> {
    let pipeline = gpu.pipeline("elementwise", entry, || shaders::ELEMENTWISE.into())?;
    let params = gpu.uniform(
        "elementwise params",
        &[cols as u32, factor.to_bits(), u32::from(single)],
    );
    let mut entries = vec![(0, &params), (1, step), (2, a)];
    entries.extend(b.map(|b| (3, b)));
    let bind = gpu.bind(&pipeline, &entries);
    Ok(Dispatch {
        pipeline,
        pipeline1: None,
        bind,
        grid: if single {
            Grid::Fixed {
                threads: cols as u32,
            }
        } else {
            Grid::Threads {
                per_token: cols as u32,
            }
        },
        _params: Some(params),
    })
}
