//! Host-in, host-out wrappers of each kernel, for conformance tests and micro-benchmarks: each
//! uploads its inputs, poisons its outputs with NaN (so an unwritten element shows), runs one
//! kernel and downloads the result. Lengths are checked; a mismatch is an error, never a panic.

mod ktrace;
mod precompile;
pub use ktrace::{Launch, kind_name, ktrace_on, ktrace_read, ktrace_reset};
pub use precompile::precompile;

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch::{self, Heads, Out, Prep};
use crate::weights::DevMatrix;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use gguf::GgmlType;
use half::f16;

mod fused;
pub use fused::prep_q16;

fn check(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(CudaError::Length {
            what,
            got,
            expected,
        })
    }
}

fn poisoned(gpu: &Gpu, len: usize) -> Result<CudaSlice<f32>> {
    gpu.upload(&vec![f32::NAN; len.max(1)])
}

fn fetch(gpu: &Gpu, buf: &CudaSlice<f32>, len: usize) -> Result<Vec<f32>> {
    let mut out = vec![0.0f32; len];
    gpu.download(buf, &mut out)?;
    Ok(out)
}

/// One weight matrix of a fused matvec: `rows` rows of `ty` in `w`, an optional bias, and an
/// optional initial output (the kernel then adds to it, as the residual connection does).
pub struct Seg<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub w: &'a [u8],
    pub bias: Option<&'a [f32]>,
    pub acc: Option<&'a [f32]>,
}

/// How the matvec prepares its input.
#[derive(Clone, Copy)]
pub enum Input<'a> {
    Plain,
    /// The input as given, each row summed in fixed point (`Out::fixed`, as the persistent
    /// kernel's folded wo sums it): one legacy q16 residual matrix without bias.
    PlainFixed,
    RmsNorm {
        w: &'a [f32],
        eps: f32,
    },
    SwiGlu {
        up: &'a [f32],
    },
    /// gelu_tanh(x) * up (gemma's GeGLU).
    GeGlu {
        up: &'a [f32],
    },
}

/// Which decode matvec kernel runs: `matvec` (small matrices), or the decode step's path for big
/// ones, `matvec_wide` (the input prepared once, then four blocks an SM; formats with q16 row
/// decoders only).
#[derive(Clone, Copy, Debug)]
pub enum Kernel {
    Matvec,
    Wide,
    /// `matvec_wide_host`, a head's walk (one plain matrix, runs of rows a warp, the legacy
    /// formats two rows at a time), here into device memory, with a flag word copied.
    WideHead,
}

/// The decode matvec over up to three matrices of `cols` columns sharing the input `x`.
pub fn matvec(
    gpu: &Gpu,
    kernel: Kernel,
    segs: &[Seg],
    cols: usize,
    x: &[f32],
    input: Input,
) -> Result<Vec<Vec<f32>>> {
    let fixed = matches!(input, Input::PlainFixed);
    if fixed
        && !matches!(segs, [s] if s.acc.is_some() && s.bias.is_none()
            && launch::is_q16_legacy(s.ty.id() as i32))
    {
        return Err(CudaError::Unsupported(
            "fixed-point rows: one legacy q16 residual matrix without bias".into(),
        ));
    }
    if segs.is_empty() || segs.len() > 3 {
        return Err(CudaError::Unsupported(format!(
            "{} matvec segments (1 to 3)",
            segs.len()
        )));
    }
    if crate::launch::prep_stride(cols) > gpu.max_smem {
        return Err(CudaError::Unsupported(format!(
            "matvec input of {cols} values"
        )));
    }
    check("matvec input", x.len(), cols)?;
    let xd = gpu.upload(x)?;
    let (_aux, prep) = prep_of(gpu, input, cols)?;
    let up = upload_segs(gpu, segs, cols)?;
    let mut outs = up.outs(gpu, segs);
    for o in &mut outs {
        o.fixed = fixed;
    }
    if let Kernel::Matvec = kernel {
        // SAFETY: every buffer above is sized for its matrix; x and aux hold `cols` values.
        unsafe { launch::matvec(gpu, &outs, cols, gpu.ptr(&xd), prep)? };
    } else {
        let buf = gpu.zeros::<u8>(launch::prep_stride(cols))?;
        let input = launch::WideIn {
            cols,
            x: gpu.ptr(&xd),
            prep,
            buf: gpu.ptr(&buf),
        };
        // The persistent kernel's error flag as the head copies it: word 0 to word 1.
        let flags = gpu.upload(&[7u32, 0])?;
        let flag = (gpu.ptr(&flags), gpu.ptr(&flags) + 4);
        // SAFETY: as for matvec above; buf holds prep_stride(cols) bytes, the flag's source and
        // destination are the two words of `flags`.
        unsafe {
            match kernel {
                Kernel::Wide => launch::matvec_wide_flag(gpu, &outs, input, None)?,
                _ => launch::matvec_wide_flag(gpu, &outs, input, Some(flag))?,
            }
        }
        gpu.sync()?;
        if let Kernel::WideHead = kernel {
            let mut f = [0u32; 2];
            gpu.download(&flags, &mut f)?;
            if f[1] != 7 {
                return Err(CudaError::Unsupported(format!(
                    "flag word copied as {}",
                    f[1]
                )));
            }
        }
    }
    segs.iter()
        .zip(&up.ys)
        .map(|(s, y)| fetch(gpu, y, s.rows))
        .collect()
}

/// `input` as the kernels' `Prep`, with its second vector (`cols` values) uploaded: keep the
/// buffer alive while the kernel runs.
fn prep_of(gpu: &Gpu, input: Input, cols: usize) -> Result<(Option<CudaSlice<f32>>, Prep)> {
    let aux = match input {
        Input::Plain | Input::PlainFixed => None,
        Input::RmsNorm { w, .. } | Input::SwiGlu { up: w } | Input::GeGlu { up: w } => {
            check("matvec input weights", w.len(), cols)?;
            Some(gpu.upload(w)?)
        }
    };
    let aux_ptr = aux.as_ref().map_or(0, |a| gpu.ptr(a));
    let prep = match input {
        Input::Plain | Input::PlainFixed => Prep::Plain,
        Input::RmsNorm { eps, .. } => Prep::RmsNorm(aux_ptr, eps),
        Input::SwiGlu { .. } => Prep::SwiGlu(aux_ptr),
        Input::GeGlu { .. } => Prep::GeGlu(aux_ptr),
    };
    Ok((aux, prep))
}

/// A fused matvec's matrices, outputs (the accumulators, or NaN) and biases on the device.
struct Uploaded {
    mats: Vec<DevMatrix>,
    ys: Vec<CudaSlice<f32>>,
    biases: Vec<Option<CudaSlice<f32>>>,
}

impl Uploaded {
    fn outs(&self, gpu: &Gpu, segs: &[Seg]) -> Vec<Out> {
        (0..segs.len())
            .map(|i| Out {
                w: self.mats[i].r(gpu),
                y: gpu.ptr(&self.ys[i]),
                bias: self.biases[i].as_ref().map_or(0, |b| gpu.ptr(b)),
                accumulate: segs[i].acc.is_some(),
                fixed: false,
            })
            .collect()
    }
}

fn upload_segs(gpu: &Gpu, segs: &[Seg], cols: usize) -> Result<Uploaded> {
    let mut up = Uploaded {
        mats: Vec::new(),
        ys: Vec::new(),
        biases: Vec::new(),
    };
    for s in segs {
        up.mats.push(DevMatrix::upload(
            gpu,
            "matvec weights",
            s.ty,
            s.rows,
            cols,
            s.w,
        )?);
        up.ys.push(match s.acc {
            Some(a) => {
                check("matvec accumulator", a.len(), s.rows)?;
                gpu.upload(a)?
            }
            None => poisoned(gpu, s.rows)?,
        });
        up.biases.push(match s.bias {
            Some(b) => {
                check("matvec bias", b.len(), s.rows)?;
                Some(gpu.upload(b)?)
            }
            None => None,
        });
    }
    Ok(up)
}

/// The prefill matmul: `y[t] = W·x[t]` (+ bias) (+ acc) for `x.len() / cols` rows of `x`.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    gpu: &Gpu,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    bias: Option<&[f32]>,
    acc: Option<&[f32]>,
) -> Result<Vec<f32>> {
    matmul_on(gpu, false, ty, rows, cols, w, x, bias, acc).map(|v| v.unwrap_or_default())
}

/// The same product through the cuBLAS path (f16 operands, f32 accumulation); `None` when
/// cuBLAS cannot be loaded here.
#[allow(clippy::too_many_arguments)]
pub fn matmul_cublas(
    gpu: &Gpu,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    bias: Option<&[f32]>,
    acc: Option<&[f32]>,
) -> Result<Option<Vec<f32>>> {
    matmul_on(gpu, true, ty, rows, cols, w, x, bias, acc)
}

#[allow(clippy::too_many_arguments)]
fn matmul_on(
    gpu: &Gpu,
    cublas: bool,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    x: &[f32],
    bias: Option<&[f32]>,
    acc: Option<&[f32]>,
) -> Result<Option<Vec<f32>>> {
    let m = DevMatrix::upload(gpu, "matmul weights", ty, rows, cols, w)?;
    if x.is_empty() || !x.len().is_multiple_of(cols) {
        return Err(CudaError::Length {
            what: "matmul input",
            got: x.len(),
            expected: cols,
        });
    }
    let n = x.len() / cols;
    let xd = gpu.upload(x)?;
    let y = match acc {
        Some(a) => {
            check("matmul accumulator", a.len(), n * rows)?;
            gpu.upload(a)?
        }
        None => poisoned(gpu, n * rows)?,
    };
    let b = match bias {
        Some(b) => {
            check("matmul bias", b.len(), rows)?;
            Some(gpu.upload(b)?)
        }
        None => None,
    };
    let o = Out {
        w: m.r(gpu),
        y: gpu.ptr(&y),
        bias: b.as_ref().map_or(0, |b| gpu.ptr(b)),
        accumulate: acc.is_some(),
        fixed: false,
    };
    if cublas {
        let Some(mut b) = crate::blas::Blas::new(gpu, rows * cols, n * cols)? else {
            return Ok(None);
        };
        // SAFETY: as below; the scratch holds the matrix and the input.
        unsafe { b.matmul(gpu, &o, gpu.ptr(&xd), n)? };
    } else {
        // SAFETY: x holds n rows of `cols`, y n rows of `rows`, bias `rows` values.
        unsafe { launch::matmul(gpu, &o, gpu.ptr(&xd), n)? };
    }
    fetch(gpu, &y, n * rows).map(Some)
}

/// RMSNorm of the rows of `x` (rows of `w.len()` values).
pub fn rms_norm(gpu: &Gpu, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>> {
    if w.is_empty() || !x.len().is_multiple_of(w.len()) {
        return Err(CudaError::Length {
            what: "rms_norm input",
            got: x.len(),
            expected: w.len(),
        });
    }
    let (xd, wd, out) = (gpu.upload(x)?, gpu.upload(w)?, poisoned(gpu, x.len())?);
    // SAFETY: sizes as checked.
    unsafe {
        launch::rms_norm(
            gpu,
            gpu.ptr(&xd),
            gpu.ptr(&wd),
            gpu.ptr(&out),
            x.len() / w.len(),
            w.len(),
            eps,
        )?
    };
    fetch(gpu, &out, x.len())
}

/// Attention and rope shapes (the kernels' own).
pub use crate::launch::Heads as HeadShape;

/// Values of one token's q, k and v.
fn dims(h: &HeadShape) -> (usize, usize, usize) {
    (
        h.n_head * h.head_dim,
        h.n_head_kv * h.head_dim,
        h.n_head_kv * h.head_dim_v,
    )
}

/// `h` when the kernels take it, else an error.
fn checked(h: &HeadShape) -> Result<Heads> {
    let ok = h.n_head_kv > 0
        && h.n_head.is_multiple_of(h.n_head_kv)
        && h.head_dim.is_multiple_of(2)
        && h.head_dim <= 256
        && h.head_dim_v <= 256
        && h.n_rot <= h.head_dim
        && h.n_rot.is_multiple_of(2);
    if !ok {
        return Err(CudaError::Unsupported(format!("head shape {h:?}")));
    }
    Ok(*h)
}

/// Rope of `n` tokens' q and k at positions `pos0..`, storing k and v into caches of `capacity`
/// positions (f16, or f32 with `f32`). Returns (rotated q, key cache, value cache), the caches
/// widened to f32; positions not written hold NaN.
#[allow(clippy::too_many_arguments)]
pub fn rope_store(
    gpu: &Gpu,
    h: &HeadShape,
    freqs: &[f64],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos0: usize,
    capacity: usize,
    f32: bool,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let heads = checked(h)?;
    let (qd, kvd, vd) = dims(h);
    let n = q.len() / qd.max(1);
    check("rope q", q.len(), n * qd)?;
    check("rope k", k.len(), n * kvd)?;
    check("rope v", v.len(), n * vd)?;
    check("rope freqs", freqs.len(), h.n_rot / 2)?;
    if n == 0 || pos0 + n > capacity {
        return Err(cpu::CpuError::ContextFull {
            needed: pos0 + n,
            capacity,
        }
        .into());
    }
    let (qb, kb, vb) = (gpu.upload(q)?, gpu.upload(k)?, gpu.upload(v)?);
    // NaN poison in the cache's element type (an f32 NaN is the words 0x0000, 0x7fc0).
    let words = if f32 { 2 } else { 1 };
    let nan: Vec<u16> = if f32 {
        vec![0, 0x7fc0]
    } else {
        vec![f16::NAN.to_bits()]
    };
    let poison = |elems: usize| nan.repeat(elems);
    let kc = gpu.upload(&poison(capacity * kvd))?;
    let vc = gpu.upload(&poison(capacity * vd))?;
    let (pos, fr) = (gpu.upload(&[pos0 as i32])?, gpu.upload(freqs)?);
    // SAFETY: sizes as checked.
    unsafe {
        launch::rope_store(
            gpu,
            &heads,
            (gpu.ptr(&qb), gpu.ptr(&kb), gpu.ptr(&vb)),
            launch::KvAt::One {
                cache: (gpu.ptr(&kc), gpu.ptr(&vc)),
                pos: gpu.ptr(&pos),
                f32,
                split: launch::AttSplit::NONE,
            },
            gpu.ptr(&fr),
            n,
        )?
    };
    let widen = |b: &CudaSlice<u16>, len: usize| -> Result<Vec<f32>> {
        let mut bits = vec![0u16; words * len];
        gpu.download(b, &mut bits)?;
        Ok(if f32 {
            bits.chunks_exact(2)
                .map(|w| f32::from_bits(u32::from(w[0]) | (u32::from(w[1]) << 16)))
                .collect()
        } else {
            bits.into_iter()
                .map(|b| f16::from_bits(b).to_f32())
                .collect()
        })
    };
    Ok((
        fetch(gpu, &qb, q.len())?,
        widen(&kc, capacity * kvd)?,
        widen(&vc, capacity * vd)?,
    ))
}

/// Causal attention of `n` queries (rows of `q`) at positions `pos0..` over caches holding
/// positions `0..pos0 + n` (given in f32, stored in f16 as the model's default cache is, or in
/// f32 with `f32`). A one-token step (`n` = 1) splits over `split` blocks a head (1: none), and
/// then runs twice on the same buffers, which must give the same bits (the split's tickets are
/// back at zero after a launch).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    gpu: &Gpu,
    h: &HeadShape,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    pos0: usize,
    f32: bool,
    split: usize,
) -> Result<Vec<f32>> {
    let heads = checked(h)?;
    let (qd, kvd, vd) = dims(h);
    let n = q.len() / qd.max(1);
    check("attention q", q.len(), n * qd)?;
    check("attention keys", keys.len(), (pos0 + n) * kvd)?;
    check("attention values", values.len(), (pos0 + n) * vd)?;
    // The cache's 16-bit words: an f16 each, or an f32's low and high halves.
    let words = |x: &[f32]| -> Vec<u16> {
        if f32 {
            x.iter()
                .flat_map(|&v| {
                    let b = v.to_bits();
                    [b as u16, (b >> 16) as u16]
                })
                .collect()
        } else {
            x.iter().map(|&v| f16::from_f32(v).to_bits()).collect()
        }
    };
    let (qb, kc, vc) = (
        gpu.upload(q)?,
        gpu.upload(&words(keys))?,
        gpu.upload(&words(values))?,
    );
    let pos = gpu.upload(&[pos0 as i32])?;
    let cols = n * h.n_head * h.head_dim_v;
    let scratch = split_scratch(gpu, h, pos0 + n, split)?;
    let at = launch::KvAt::One {
        cache: (gpu.ptr(&kc), gpu.ptr(&vc)),
        pos: gpu.ptr(&pos),
        f32,
        split: scratch
            .as_ref()
            .map_or(launch::AttSplit::NONE, |s| s.split(gpu)),
    };
    let mut runs = Vec::new();
    for _ in 0..if scratch.is_some() && n == 1 { 2 } else { 1 } {
        let out = poisoned(gpu, cols)?;
        // SAFETY: sizes as checked; the split's scratch is sized for this cache.
        unsafe { launch::attention(gpu, &heads, gpu.ptr(&qb), at, gpu.ptr(&out), n)? };
        runs.push(fetch(gpu, &out, cols)?);
    }
    same_runs("attention", runs)
}

/// The split scratch of a test's cache of `capacity` positions, over `split` blocks a head.
fn split_scratch(
    gpu: &Gpu,
    h: &HeadShape,
    capacity: usize,
    split: usize,
) -> Result<Option<launch::SplitScratch>> {
    launch::SplitScratch::new(gpu, (1, h.n_head, h.head_dim_v), capacity, split)
}

/// The first of several runs' outputs, which must have the same bits.
fn same_runs(what: &str, mut runs: Vec<Vec<f32>>) -> Result<Vec<f32>> {
    let bits = |r: &[f32]| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    if runs.windows(2).any(|w| bits(&w[0]) != bits(&w[1])) {
        return Err(CudaError::Unsupported(format!(
            "{what}: a second launch on the same buffers gave other bits"
        )));
    }
    Ok(runs.swap_remove(0))
}

/// One decode token's rope, cache store and attention over f16 caches whose positions `0..pos`
/// hold `keys` and `values` (rounded to f16), at position `pos`: as two launches (`rope_store`,
/// then `attention`) or, with `fused`, as one (`rope_attention`; with `prep` too, quantizing its
/// output for wo); split over `split` blocks a head (1: none). Returns the attention output, the
/// caches' words after the step, and the q16 row (empty without `prep`).
pub type RopeAttention = (Vec<f32>, Vec<u16>, Vec<u16>, Vec<u8>);

/// See [`RopeAttention`].
#[allow(clippy::too_many_arguments)]
pub fn rope_attention(
    gpu: &Gpu,
    h: &HeadShape,
    freqs: &[f64],
    (q, k, v): (&[f32], &[f32], &[f32]),
    (keys, values): (&[f32], &[f32]),
    pos: usize,
    (fused, prep, split): (bool, bool, usize),
) -> Result<RopeAttention> {
    let heads = checked(h)?;
    let (qd, kvd, vd) = dims(h);
    check("rope_attention q", q.len(), qd)?;
    check("rope_attention k", k.len(), kvd)?;
    check("rope_attention v", v.len(), vd)?;
    check("rope_attention keys", keys.len(), pos * kvd)?;
    check("rope_attention values", values.len(), pos * vd)?;
    check("rope_attention freqs", freqs.len(), h.n_rot / 2)?;
    let half = |x: &[f32], n: usize| -> Vec<u16> {
        let mut w: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        w.resize(n, f16::NAN.to_bits());
        w
    };
    let (qb, kb, vb) = (gpu.upload(q)?, gpu.upload(k)?, gpu.upload(v)?);
    let kc = gpu.upload(&half(keys, (pos + 1) * kvd))?;
    let vc = gpu.upload(&half(values, (pos + 1) * vd))?;
    let (posd, fr) = (gpu.upload(&[pos as i32])?, gpu.upload(freqs)?);
    let out = poisoned(gpu, h.n_head * h.head_dim_v)?;
    let scratch = split_scratch(gpu, h, pos + 1, split)?;
    let at = launch::KvAt::One {
        cache: (gpu.ptr(&kc), gpu.ptr(&vc)),
        pos: gpu.ptr(&posd),
        f32: false,
        split: scratch
            .as_ref()
            .map_or(launch::AttSplit::NONE, |s| s.split(gpu)),
    };
    let qkv = (gpu.ptr(&qb), gpu.ptr(&kb), gpu.ptr(&vb));
    let cols = h.n_head * h.head_dim_v;
    let pbuf = gpu.zeros::<u8>(launch::prep_stride(cols))?;
    let pp = if prep && fused { gpu.ptr(&pbuf) } else { 0 };
    if pp != 0 && !h.head_dim_v.is_multiple_of(32) {
        return Err(CudaError::Unsupported(
            "a prepared output of heads not a multiple of 32 wide".into(),
        ));
    }
    // SAFETY: sizes as checked; the caches hold pos + 1 positions; pbuf prep_stride(cols) bytes.
    unsafe {
        if fused {
            launch::rope_attention(gpu, &heads, qkv, at, gpu.ptr(&fr), gpu.ptr(&out), pp)?;
        } else {
            launch::rope_store(gpu, &heads, qkv, at, gpu.ptr(&fr), 1)?;
            launch::attention(gpu, &heads, qkv.0, at, gpu.ptr(&out), 1)?;
        }
    }
    let mut kw = vec![0u16; (pos + 1) * kvd];
    let mut vw = vec![0u16; (pos + 1) * vd];
    gpu.download(&kc, &mut kw)?;
    gpu.download(&vc, &mut vw)?;
    let q16 = if pp != 0 {
        fused::q16_of(gpu, &pbuf, cols)?
    } else {
        Vec::new()
    };
    Ok((fetch(gpu, &out, cols)?, kw, vw, q16))
}

/// Embedding lookup: the rows `tokens` of a `rows` x `cols` matrix of `ty`, dequantized.
pub fn embed(
    gpu: &Gpu,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: &[u8],
    tokens: &[u32],
) -> Result<Vec<f32>> {
    let m = DevMatrix::upload(gpu, "embedding", ty, rows, cols, w)?;
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= rows) {
        return Err(cpu::CpuError::BadToken {
            id,
            pos: 0,
            vocab: rows,
        }
        .into());
    }
    let t = gpu.upload(tokens)?;
    let out = poisoned(gpu, tokens.len() * cols)?;
    // SAFETY: ids checked; out holds one row per token.
    unsafe { launch::embed(gpu, &m.r(gpu), gpu.ptr(&t), tokens.len(), gpu.ptr(&out))? };
    fetch(gpu, &out, tokens.len() * cols)
}

/// A gated unit, prefill's launch: SwiGLU `silu(g) * u`, or GeGLU `gelu_tanh(g) * u`.
pub fn glu(gpu: &Gpu, act: model::FfnAct, g: &[f32], u: &[f32]) -> Result<Vec<f32>> {
    check("glu up", u.len(), g.len())?;
    let (gd, ud) = (gpu.upload(g)?, gpu.upload(u)?);
    // SAFETY: both hold g.len() values.
    unsafe { launch::glu(gpu, act, gpu.ptr(&gd), gpu.ptr(&ud), g.len())? };
    fetch(gpu, &gd, g.len())
}

/// Kernel launches and graph replays issued so far from the calling thread.
pub fn launch_count() -> u64 {
    crate::launch::launch_count()
}

/// One kernel of a timeline: its launch's name (as `launch_dep!` names it) and the device time
/// from its mark to the next one (its run and the gap before the next kernel), in microseconds.
pub struct TimelineEntry {
    pub kernel: &'static str,
    pub us: f64,
}

/// Runs `f` with the stream held for `hold_us` microseconds first, so that the launches `f`
/// queues in the meantime run back to back as in a graph, and returns what `f` returned with the
/// time of every kernel launched through `launch_dep!` (the decode kernels) and of each download
/// (`download`: the copy, the host's wake-up and its return from `f`) on this thread.
/// `hold_us` must outlast the host's queueing of `f`'s launches, or the first entries measure
/// the host's pace.
pub fn timeline<R>(
    gpu: &Gpu,
    hold_us: u64,
    f: impl FnOnce() -> R,
) -> Result<(R, Vec<TimelineEntry>)> {
    let ns = hold_us * 1000;
    let mut b = gpu.stream.launch_builder(&gpu.k.hold);
    b.arg(&ns);
    // SAFETY: `hold` takes one u64 and touches no memory.
    unsafe {
        b.launch(LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .map_err(crate::error::drv("hold launch"))?;
    crate::launch::timeline_swap(Some(Vec::new()));
    let r = f();
    let end = gpu
        .ctx
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(crate::error::drv("event"))?;
    end.record(&gpu.stream)
        .map_err(crate::error::drv("event"))?;
    let marks = crate::launch::timeline_swap(None).unwrap_or_default();
    let mut out = Vec::with_capacity(marks.len());
    for (i, (kernel, e)) in marks.iter().enumerate() {
        let next = marks.get(i + 1).map_or(&end, |m| &m.1);
        let ms = e.elapsed_ms(next).map_err(crate::error::drv("event"))?;
        out.push(TimelineEntry {
            kernel,
            us: f64::from(ms) * 1000.0,
        });
    }
    Ok((r, out))
}

/// `pick_greedy` on `logits`, with `flag` as the word after them (the persistent kernel's error
/// flag, passed through when given): the pick and the fourth word. The kernel runs twice on the
/// same buffer (its result words poisoned before each), which must give the same words: its
/// blocks' ticket is back at zero after a launch. The second run also writes its words to mapped
/// host memory (`crate::mapped`, where the driver maps it), which must hold the same.
pub fn pick(gpu: &Gpu, logits: &[f32], flag: Option<u32>) -> Result<(crate::Pick, u32)> {
    use crate::forward::pick::{PICK_WORDS, launch_pick, pick_buffer_words};
    let mut row = logits.to_vec();
    row.push(f32::from_bits(flag.unwrap_or(0)));
    let x = gpu.upload(&row)?;
    let mut init = vec![f32::NAN; pick_buffer_words(logits.len())];
    init[PICK_WORDS] = 0.0;
    let mirror = crate::mapped::HostWords::new(gpu, PICK_WORDS)?.filter(|m| m.mapped());
    let mut runs = Vec::new();
    for run in 0..2 {
        let out = gpu.upload(&init)?;
        let host = match &mirror {
            Some(m) if run == 1 => m.dev_at(0),
            _ => 0,
        };
        // SAFETY: x holds the logits and one more word; out pick_buffer_words, ticket zero;
        // host 0 or four mapped words.
        unsafe { launch_pick(gpu, gpu.ptr(&x), logits.len(), flag.is_some(), &out, host)? };
        let w = fetch(gpu, &out, init.len())?;
        init[PICK_WORDS..].copy_from_slice(&w[PICK_WORDS..]);
        runs.push(
            w[..PICK_WORDS]
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
        );
    }
    if runs[0] != runs[1] || init[PICK_WORDS].to_bits() != 0 {
        return Err(crate::error::CudaError::Unsupported(format!(
            "pick: a second launch on the same buffer gave {:?} after {:?} (ticket {:#x})",
            runs[1],
            runs[0],
            init[PICK_WORDS].to_bits()
        )));
    }
    if let Some(m) = &mirror {
        // SAFETY: the kernel is complete (fetch waited for the stream).
        let h = unsafe { m.read::<PICK_WORDS>(0) };
        if h[..] != runs[1][..] {
            return Err(crate::error::CudaError::Unsupported(format!(
                "pick: the mapped host words {h:?} differ from the device's {:?}",
                runs[1]
            )));
        }
    }
    let w: Vec<f32> = runs[0].iter().map(|&b| f32::from_bits(b)).collect();
    Ok((crate::Pick::from_words(&w), runs[0][PICK_WORDS - 1]))
}

/// `pick_top` for `k` on `logits`, with `flag` as the word after them (passed through when
/// given): the top k and the word after the result. The result words start poisoned, and the
/// blocks' ticket must be back at zero after the launch.
pub fn top(
    gpu: &Gpu,
    logits: &[f32],
    k: usize,
    flag: Option<u32>,
) -> Result<(crate::TopLogits, u32)> {
    use crate::forward::top::{TOPK_PART, launch_top, top_buffer_words, top_words};
    if !crate::top_k_fits(logits.len(), k) {
        return Err(CudaError::Unsupported(format!(
            "top {k} of {}",
            logits.len()
        )));
    }
    let mut row = logits.to_vec();
    row.push(f32::from_bits(flag.unwrap_or(0)));
    let x = gpu.upload(&row)?;
    let mut init = vec![f32::NAN; top_buffer_words(logits.len())];
    init[TOPK_PART] = 0.0;
    let out = gpu.upload(&init)?;
    // SAFETY: x holds the logits and one more word; out top_buffer_words, ticket zero.
    unsafe { launch_top(gpu, gpu.ptr(&x), logits.len(), k, flag.is_some(), &out)? };
    let w = fetch(gpu, &out, init.len())?;
    if w[TOPK_PART].to_bits() != 0 {
        return Err(CudaError::Unsupported(format!(
            "pick_top left its ticket at {:#x}",
            w[TOPK_PART].to_bits()
        )));
    }
    let words = top_words(k);
    let r = crate::forward::top::TopLogits::from_words(&w[..words], k);
    Ok((r, w[words].to_bits()))
}
