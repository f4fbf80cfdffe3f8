//! One launch a token: the persistent decode kernel's step list (kernels/persistent_steps.cuh), built
//! once per cache, and its launch. See docs/cuda-persistent.md for the design and measurements.

use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use crate::launch::{self, Heads, Out, WeightRef};
use cudarc::driver::{CudaFunction, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

mod blocks;
mod config;
use config::{
    blocks_per_sm_cap, chunk_bytes, env_i32, l2_ahead, mark_packed, skip_knobs, stages, types_in,
};
pub(crate) use config::{ll_max, pk_build};

pub(crate) const PK_THREADS: u32 = 256;
const OP_MATVEC: i32 = 0;
const OP_ATTN: i32 = 1;
/// Attention with the layer's wo folded in (experiment `MOLLA_KDEFS=WOFOLD`,
/// kernels/persistent_steps.cuh `PK_OP_ATTN_WO`).
const OP_ATTN_WO: i32 = 2;
const PREP_PLAIN: i32 = 0;
const PREP_RMSNORM: i32 = 1;
const PREP_EMBED_RMSNORM: i32 = 2;
const PREP_FOLD_RMSNORM: i32 = 3;

/// One step of the list (kernels/persistent_steps.cuh `PkStep`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PkStep {
    w: [u64; 3],
    bias: [u64; 3],
    y: [u64; 3],
    x: u64,
    norm_w: u64,
    emb: u64,
    q: u64,
    k: u64,
    v: u64,
    kc: u64,
    vc: u64,
    out: u64,
    rows: [i32; 3],
    row_bytes: [i32; 3],
    ty: [i32; 3],
    accumulate: [i32; 3],
    op: i32,
    prep: i32,
    pair: i32,
    nseg: i32,
    cols: i32,
    total: i32,
    emb_ty: i32,
    emb_rows: i32,
    emb_row_bytes: i32,
    eps: f32,
    res_smem: i32,
    in_step: i32,
    out_ll: i32,
    in_ll: i32,
    arrive: i32,
    /// 1: every block's rows of this matvec step fit its chunk buffers at once (see
    /// [`mark_packed`]): they are copied in one go, each segment's share after the last.
    packed: i32,
}

// SAFETY: plain #[repr(C)] data whose layout matches the CUDA struct (checked in tests below).
unsafe impl DeviceRepr for PkStep {}

/// The kernel's argument (kernels/persistent_steps.cuh `PkArgs`), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PkArgs {
    steps: u64,
    blks: u64,
    err: u64,
    freqs: u64,
    trace: u64,
    counters: u64,
    nsteps: i32,
    token: u32,
    pos: i32,
    tag_base: u32,
    epoch: u32,
    n_head: i32,
    n_head_kv: i32,
    hd: i32,
    hdv: i32,
    n_rot: i32,
    neox: i32,
    scale: f32,
    timeout_ms: u32,
    chunk: i32,
    xs_bytes: i32,
    knobs: i32,
    nw_bytes: i32,
    xq_off: i32,
    stages: i32,
    l2_ahead: i32,
    fold_acc: u64,
    fold_n: i32,
    pad: i32,
}

// SAFETY: as for PkStep.
unsafe impl DeviceRepr for PkArgs {}

/// How a matvec step prepares its input.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Input {
    Plain(u64),
    /// rmsnorm(x) * w, epsilon.
    RmsNorm(u64, u64, f32),
    /// The token's embedding row, then RMSNorm (w, eps).
    EmbedRmsNorm {
        emb: WeightRef,
        w: u64,
        eps: f32,
    },
    /// x (the raw row the block's previous RMSNorm step read) plus a folded wo's fixed-point
    /// accumulator (`acc`, see [`Steps::attention_wo`]), then RMSNorm (w, eps).
    FoldRmsNorm {
        acc: u64,
        w: u64,
        eps: f32,
    },
}

/// Builds the step list on the host. Steps pass values through tagged buffers, or plain ones
/// with a counter when wider than `ll_max` values (kernels/persistent_steps.cuh): every buffer a step
/// reads must be one an earlier step wrote, and the list records which step that was.
#[derive(Default)]
pub(crate) struct Steps {
    pub list: Vec<PkStep>,
    /// Widest matvec input, in values.
    pub max_cols: usize,
    /// Largest bytes of one row of a step (a pair step: of both rows).
    pub max_row: usize,
    /// Widest input that is RMS-normalised (its weights are staged in shared memory).
    pub max_norm_cols: usize,
    /// The last step that wrote each buffer (by address), and whether in tagged form.
    writer: std::collections::HashMap<u64, (i32, bool)>,
    /// Widest output a step writes in tagged form.
    ll_max: usize,
    /// A read of a buffer no step wrote, or an accumulation the kernel does not do.
    bad: Option<String>,
}

impl Steps {
    /// A builder whose steps write outputs of up to `ll_max` values in tagged form.
    pub fn new(ll_max: usize) -> Steps {
        Steps {
            ll_max,
            ..Steps::default()
        }
    }

    /// Whether the last step that wrote `x` wrote it as tagged words (else plain f32).
    pub fn tagged(&self, x: u64) -> bool {
        self.writer.get(&x).is_some_and(|w| w.1)
    }

    /// The step that last wrote buffer `x`, and whether in tagged form.
    fn producer(&mut self, x: u64) -> (i32, bool) {
        match self.writer.get(&x) {
            Some(&w) => w,
            None => {
                self.bad.get_or_insert_with(|| {
                    format!("step {} reads a buffer no step wrote", self.list.len())
                });
                (-1, false)
            }
        }
    }

    /// Fewest rows of a matvec step (a block must have rows in every step it reads for, see
    /// kernels/persistent_steps.cuh).
    pub fn min_rows(&self) -> usize {
        self.list
            .iter()
            .filter(|s| s.op == OP_MATVEC)
            .map(|s| s.total.max(0) as usize)
            .min()
            .unwrap_or(0)
    }

    fn input(&mut self, st: &mut PkStep, input: Input, cols: usize) {
        st.cols = cols as i32;
        self.max_cols = self.max_cols.max(cols);
        if !matches!(input, Input::Plain(_)) {
            self.max_norm_cols = self.max_norm_cols.max(cols);
        }
        st.in_step = -1;
        let mut from = |x: u64, st: &mut PkStep| {
            let (s, ll) = self.producer(x);
            (st.in_step, st.in_ll) = (s, i32::from(ll));
        };
        match input {
            Input::Plain(x) => {
                (st.prep, st.x) = (PREP_PLAIN, x);
                from(x, st);
            }
            Input::RmsNorm(x, w, eps) => {
                (st.prep, st.x, st.norm_w, st.eps) = (PREP_RMSNORM, x, w, eps);
                from(x, st);
            }
            Input::FoldRmsNorm { acc, w, eps } => {
                (st.prep, st.x, st.norm_w, st.eps) = (PREP_FOLD_RMSNORM, acc, w, eps);
                from(acc, st);
            }
            Input::EmbedRmsNorm { emb, w, eps } => {
                st.prep = PREP_EMBED_RMSNORM;
                (st.emb, st.emb_ty, st.emb_rows, st.emb_row_bytes) =
                    (emb.ptr, emb.ty, emb.rows as i32, emb.row_bytes as i32);
                (st.norm_w, st.eps) = (w, eps);
            }
        }
    }

    /// Records the step being added as the writer of its outputs (`len`: the widest, in values):
    /// tagged when `tagged` and no wider than `ll_max`, else plain f32 with a counter (plain
    /// outputs no step reads, the logits, need none).
    fn push(&mut self, mut st: PkStep, outs: &[u64], len: usize, tagged: bool) {
        let ll = tagged && len <= self.ll_max;
        st.out_ll = i32::from(ll);
        st.arrive = i32::from(tagged && !ll);
        let s = self.list.len() as i32;
        if tagged {
            for &y in outs {
                self.writer.insert(y, (s, ll));
            }
        }
        self.list.push(st);
    }

    fn seg(&mut self, st: &mut PkStep, i: usize, o: &Out) {
        st.w[i] = o.w.ptr;
        st.bias[i] = o.bias;
        st.y[i] = o.y;
        st.rows[i] = o.w.rows as i32;
        st.row_bytes[i] = o.w.row_bytes as i32;
        st.ty[i] = o.w.ty;
        st.accumulate[i] = i32::from(o.accumulate);
    }

    /// y = W · input + y where y is the residual row the previous RMSNorm step read (as its
    /// input, before normalising): the block adds the copy it kept instead of reading y again.
    pub fn residual(&mut self, out: &Out, cols: usize, input: Input) {
        self.add_matvec(std::slice::from_ref(out), cols, input, true, true);
    }

    /// y_i = W_i · input for up to three matrices (bias as each `Out` says; no accumulation),
    /// into tagged buffers.
    pub fn matvec(&mut self, outs: &[Out], cols: usize, input: Input) {
        self.add_matvec(outs, cols, input, false, true);
    }

    /// As `matvec`, into plain f32 buffers that no later step reads (the logits).
    pub fn matvec_plain(&mut self, outs: &[Out], cols: usize, input: Input) {
        self.add_matvec(outs, cols, input, false, false);
    }

    fn add_matvec(
        &mut self,
        outs: &[Out],
        cols: usize,
        input: Input,
        residual: bool,
        tagged: bool,
    ) {
        let mut st = PkStep {
            op: OP_MATVEC,
            nseg: outs.len().min(3) as i32,
            res_smem: i32::from(residual),
            ..PkStep::default()
        };
        self.input(&mut st, input, cols);
        for (i, o) in outs.iter().take(3).enumerate() {
            self.seg(&mut st, i, o);
            if o.accumulate != residual {
                self.bad.get_or_insert_with(|| {
                    format!("step {}: only a residual step accumulates", self.list.len())
                });
            }
        }
        st.total = outs.iter().take(3).map(|o| o.w.rows as i32).sum();
        for o in outs.iter().take(3) {
            self.max_row = self.max_row.max(o.w.row_bytes);
        }
        let ys: Vec<u64> = outs.iter().take(3).map(|o| o.y).collect();
        let len = outs.iter().take(3).map(|o| o.w.rows).max().unwrap_or(0);
        self.push(st, &ys, len, tagged);
    }

    /// `y = silu(gate · x) * (up · x)` into gate's output.
    pub fn gate_up(&mut self, gate: &Out, up: &Out, cols: usize, input: Input) {
        let mut st = PkStep {
            op: OP_MATVEC,
            nseg: 2,
            pair: 1,
            total: gate.w.rows as i32,
            ..PkStep::default()
        };
        self.input(&mut st, input, cols);
        self.seg(&mut st, 0, gate);
        self.seg(&mut st, 1, up);
        self.max_row = self.max_row.max(gate.w.row_bytes + up.w.row_bytes);
        self.push(st, &[gate.y], gate.w.rows, true);
    }

    /// Rope, cache store and attention of one layer: (q, k, v) raw (one step wrote all three),
    /// caches, output (`out_len` values).
    pub fn attention(
        &mut self,
        (q, k, v): (u64, u64, u64),
        (kc, vc): (u64, u64),
        out: u64,
        out_len: usize,
    ) {
        let (in_step, in_ll) = self.producer(q);
        if self.producer(k) != (in_step, in_ll) || self.producer(v) != (in_step, in_ll) {
            self.bad
                .get_or_insert_with(|| "attention: q, k and v come from different steps".into());
        }
        let st = PkStep {
            op: OP_ATTN,
            q,
            k,
            v,
            kc,
            vc,
            out,
            in_step,
            in_ll: i32::from(in_ll),
            ..PkStep::default()
        };
        self.push(st, &[out], out_len, true);
    }

    /// As [`Steps::attention`] with the layer's wo folded in (experiment `MOLLA_KDEFS=WOFOLD`):
    /// instead of the heads' output, each block adds its share of `wo`'s rows over its head's
    /// columns into `wo.y`, a row of `wo.w.rows` fixed-point (32.32) u64 words that must be zero
    /// when the launch begins; the next step reads it with [`Input::FoldRmsNorm`] once every
    /// block has arrived. `att_len`: the heads' output width (wo's columns).
    pub fn attention_wo(
        &mut self,
        qkv: (u64, u64, u64),
        caches: (u64, u64),
        wo: &Out,
        att_len: usize,
    ) {
        self.attention(qkv, caches, wo.y, usize::MAX);
        if let Some(st) = self.list.last_mut() {
            st.op = OP_ATTN_WO;
            st.cols = att_len as i32;
        }
        let i = self.list.len() - 1;
        let mut st = self.list[i];
        self.seg(&mut st, 0, wo);
        self.list[i] = st;
    }
}

/// A persistent decode step's timing, for measurements (`MOLLA_PK_TRACE=1` with
/// `MOLLA_KDEFS=PKMEASURE`).
#[derive(Clone, Debug)]
pub struct Trace {
    /// Blocks of the launch.
    pub grid: usize,
    /// Op of each step: 0 matvec, 1 attention.
    pub ops: Vec<i32>,
    /// Per step, per block, 8 words: global-timer ns when the work starts (after the wait) and
    /// ends; SM cycles spent on the input, waiting for the first weights, and on the rest.
    pub stamps: Vec<u64>,
    /// Host time of that step: in the launch call, and from its return until the logits were
    /// copied back (kernel, copy, stream sync), in us.
    pub host_us: [f64; 2],
    /// The measurement build's layout (`MOLLA_KDEFS=PKMEASURE`): per step and block, the global
    /// timer (ns) at the step's start (before its staging) and end, then SM cycles of the
    /// staging, the wait for the input, the RMSNorm sum, the rest of the input's preparation
    /// (attention: rope and the cache store), the wait for the first weights, the rows (the
    /// attention itself).
    pub fine: bool,
}

/// A cache's persistent decode: its step list and tagged buffers on the device.
pub(crate) struct Persistent {
    /// The kernel: the one built for packed steps only (`Gpu::persistent_packed`) when every
    /// matvec step is packed, else the model's.
    f: CudaFunction,
    packed_build: bool,
    steps: CudaSlice<PkStep>,
    /// Each block's share of each packed matvec step (persistent/blocks.rs).
    blks: CudaSlice<blocks::PkBlk>,
    /// The tagged buffers the steps pass values through (x, q, k, v, attention out, gate).
    ll: CudaSlice<u64>,
    /// Per step: blocks done with it, for steps with plain outputs.
    counters: CudaSlice<u32>,
    nsteps: usize,
    /// Launches since `ll` and `counters` were last zeroed: step s's tag is
    /// epoch * nsteps + s + 1, and a counter reaches epoch * grid.
    epoch: u32,
    grid: u32,
    smem: u32,
    chunk: usize,
    xs_bytes: usize,
    xq_off: usize,
    stages: usize,
    nw_bytes: usize,
    /// PkArgs::knobs (`MOLLA_PK_NAP`) and l2_ahead (`MOLLA_PK_L2`), read when the list is built.
    knobs: i32,
    l2_ahead: i32,
    /// With `MOLLA_PK_TRACE=1`: per step and block, when the work started and ended (ns).
    trace: Option<CudaSlice<u64>>,
    /// The op of each step (0 matvec, 1 attention), for reading the trace.
    ops: Vec<i32>,
    /// With the head outside the kernel (`MOLLA_PK_HEAD=wide`): the x the head reads after the
    /// kernel through `matvec_wide`, and whether the kernel left it as tagged words (else plain
    /// f32: models wider than `ll_max`) (forward/persistent_decode.rs).
    pub(crate) head_x: Option<(u64, bool)>,
    /// With wo folded into attention (`MOLLA_KDEFS=WOFOLD`): the accumulators' address and
    /// length in u64 words, inside `ll` (zeroed with it; the kernel zeroes them as it ends).
    pub(crate) fold: (u64, usize),
}

/// A wait longer than this is a hang: the kernel stops and reports it.
const TIMEOUT_MS: u32 = 2000;

impl Persistent {
    /// Uploads `steps` and sizes the grid so that every block is resident at once (or refuses).
    /// `ll` holds the tagged buffers the steps' addresses point into, zeroed; `h`: the heads the
    /// launches will pass (a kernel built for another shape is refused).
    pub fn new(gpu: &Gpu, steps: Steps, ll: CudaSlice<u64>, h: &Heads) -> Result<Persistent> {
        if steps.list.is_empty() {
            return Err(CudaError::Unsupported("empty step list".into()));
        }
        if let Some(why) = steps.bad {
            return Err(CudaError::Unsupported(format!("persistent decode: {why}")));
        }
        let shape = [h.head_dim, h.head_dim_v, h.n_head, h.n_head_kv].map(|v| v as u32);
        if let Some(built) = gpu.pk_build.shape
            && built != shape
        {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: the kernel was built for heads {built:?}, not {shape:?}"
            )));
        }
        if let Some(mask) = gpu.pk_build.types
            && let Some(st) = steps.list.iter().find(|s| s.op == 0 && !types_in(s, mask))
        {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: the kernel was built for types {mask:#x}, a step has {:?}",
                st.ty
            )));
        }
        // Shared memory: the input row (at least the 512 floats attention uses) and its q16
        // quantization, then the chunk buffers with 64 bytes of alignment slack each.
        let xq_off = (steps.max_cols * 4).max(4096).next_multiple_of(128);
        let xs_bytes = (xq_off + launch::xq_bytes(steps.max_cols)).next_multiple_of(128);
        let nw_bytes = (steps.max_norm_cols * 4).next_multiple_of(128);
        let free = gpu.pk_max_smem.saturating_sub(xs_bytes + 2 * nw_bytes);
        // As many buffers as asked for (`MOLLA_PK_STAGES`) while a row still fits one.
        let mut stages = stages();
        let mut chunk = 0;
        while stages > 0 {
            chunk = chunk_bytes().min((free / stages).saturating_sub(64)) & !15;
            if chunk >= steps.max_row {
                break;
            }
            stages -= 1;
        }
        if stages == 0 {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: rows of {} bytes and inputs of {} values do not fit shared memory",
                steps.max_row, steps.max_cols
            )));
        }
        let smem = xs_bytes + 2 * nw_bytes + stages * (chunk + 64);
        let f = &gpu.k.decode_persistent;
        let occ = f
            .occupancy_max_active_blocks_per_multiprocessor(PK_THREADS, smem, None)
            .map_err(drv("occupancy"))?;
        if occ == 0 {
            return Err(CudaError::Unsupported(
                "persistent decode: the kernel does not fit on an SM".into(),
            ));
        }
        // Blocks an SM: as many as fit, at most `MOLLA_PK_BPS`.
        let per_sm = occ.min(blocks_per_sm_cap());
        let grid = (per_sm as usize * gpu.sm_count) as u32;
        // `MOLLA_PK_BLOCKS` caps the grid below that (measurement: fewer blocks contend less on
        // each step's counter but each owns more rows).
        let grid = match env_i32("MOLLA_PK_BLOCKS", 0) {
            b if b > 0 => grid.min(b as u32),
            _ => grid,
        };
        // Every block must own rows of every matvec step: a block that only read a step's input
        // would not hold back the next writer of that input (kernels/persistent_steps.cuh).
        let grid = grid.min(steps.min_rows().max(1) as u32);
        // A folded wo needs a block for every head (each head's blocks share its rows).
        if steps.list.iter().any(|s| s.op == OP_ATTN_WO) && (grid as usize) < h.n_head {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: wo folded into attention needs {} blocks, the grid has {grid}",
                h.n_head
            )));
        }
        let mut steps = steps;
        mark_packed(&mut steps.list, grid as usize, stages * (chunk + 64));
        // Every matvec step packed: the kernel without the chunked pipeline, when it loads and
        // fits as many blocks on an SM.
        let packed = steps
            .list
            .iter()
            .all(|s| s.op != OP_MATVEC || s.packed != 0)
            .then(|| gpu.persistent_packed())
            .flatten()
            .filter(|p| {
                p.occupancy_max_active_blocks_per_multiprocessor(PK_THREADS, smem, None)
                    .is_ok_and(|o| o >= per_sm)
            });
        let packed_build = packed.is_some();
        let f = packed.unwrap_or(f).clone();
        // Only the measurement build (`MOLLA_KDEFS=PKMEASURE`) has the trace's code.
        let trace = if env_i32("MOLLA_PK_TRACE", 0) != 0 && crate::compile::experiment("PKMEASURE")
        {
            Some(gpu.zeros(8 * steps.list.len() * grid as usize)?)
        } else {
            None
        };
        Ok(Persistent {
            f,
            packed_build,
            trace,
            ops: steps.list.iter().map(|s| s.op).collect(),
            ll,
            counters: gpu.zeros(steps.list.len())?,
            blks: gpu.upload(&blocks::table(&steps.list, grid as usize))?,
            steps: gpu.upload(&steps.list)?,
            nsteps: steps.list.len(),
            epoch: 0,
            grid,
            smem: smem as u32,
            chunk,
            xs_bytes,
            xq_off,
            stages,
            nw_bytes,
            knobs: env_i32("MOLLA_PK_NAP", 0).clamp(0, 255) << 8 | skip_knobs(),
            l2_ahead: l2_ahead(),
            head_x: None,
            fold: (0, 0),
        })
    }

    /// With tracing on, after a launch: the op of each step (0 matvec, 1 attention) and, per
    /// step and block, eight words: the global timer (ns) when the step starts (its weights
    /// issued) and when it ends, then SM cycles spent on the input (its wait included), waiting
    /// for the first weights, on the rest, and from the start until the input had arrived.
    pub fn read_trace(&self, gpu: &Gpu) -> Result<Option<Trace>> {
        let Some(t) = &self.trace else {
            return Ok(None);
        };
        let mut stamps = vec![0u64; t.len()];
        gpu.download(t, &mut stamps)?;
        Ok(Some(Trace {
            grid: self.grid as usize,
            ops: self.ops.clone(),
            stamps,
            host_us: [0.0; 2],
            fine: crate::compile::experiment("PKMEASURE"),
        }))
    }

    /// Blocks of the launch.
    pub fn grid(&self) -> u32 {
        self.grid
    }

    /// Whether it runs the kernel built for packed steps only.
    pub fn packed_build(&self) -> bool {
        self.packed_build
    }

    /// Launches one decode step. `err` is a device u32 that must be 0; the kernel stores a nonzero
    /// value there when a wait timed out.
    ///
    /// # Safety
    /// Every address in the step list is live; `err` and `freqs` are device addresses of this
    /// model and cache.
    pub unsafe fn launch(
        &mut self,
        gpu: &Gpu,
        h: &Heads,
        (token, pos): (u32, usize),
        err: u64,
        freqs: u64,
    ) -> Result<()> {
        let n = self.nsteps as u64;
        let e = u64::from(self.epoch);
        if (e + 2) * n >= u64::from(u32::MAX) || (e + 2) * u64::from(self.grid) >= 1 << 31 {
            // Tags would repeat, or counters come near the wrapping comparison's range: zeroed
            // words carry tag 0, which no step uses.
            gpu.clear(&mut self.ll)?;
            gpu.clear(&mut self.counters)?;
            self.epoch = 0;
        }
        self.epoch += 1;
        let a = PkArgs {
            steps: gpu.ptr(&self.steps),
            blks: gpu.ptr(&self.blks),
            err,
            freqs,
            nsteps: self.nsteps as i32,
            token,
            pos: pos as i32,
            tag_base: (u64::from(self.epoch) * n) as u32,
            epoch: self.epoch,
            counters: gpu.ptr(&self.counters),
            n_head: h.n_head as i32,
            n_head_kv: h.n_head_kv as i32,
            hd: h.head_dim as i32,
            hdv: h.head_dim_v as i32,
            n_rot: h.n_rot as i32,
            neox: i32::from(h.neox),
            scale: 1.0 / (h.head_dim as f32).sqrt(),
            timeout_ms: TIMEOUT_MS,
            chunk: self.chunk as i32,
            xs_bytes: self.xs_bytes as i32,
            knobs: self.knobs,
            nw_bytes: self.nw_bytes as i32,
            trace: self.trace.as_ref().map_or(0, |t| gpu.ptr(t)),
            xq_off: self.xq_off as i32,
            stages: self.stages as i32,
            l2_ahead: self.l2_ahead,
            fold_acc: self.fold.0,
            fold_n: self.fold.1 as i32,
            pad: 0,
        };
        let mut b = gpu.stream.launch_builder(&self.f);
        b.arg(&a);
        launch::count_launch();
        let cfg = LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (PK_THREADS, 1, 1),
            shared_mem_bytes: self.smem,
        };
        // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
        unsafe { b.launch(cfg) }.map_err(drv("persistent launch"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(rows: usize, y: u64, accumulate: bool) -> Out {
        Out {
            w: WeightRef {
                ptr: 0x1000,
                ty: 8,
                rows,
                cols: 64,
                row_bytes: 68,
            },
            y,
            bias: 0,
            accumulate,
        }
    }

    /// The first layer's q/k/v step (from the embedding) into 0x20, 0x30, 0x40.
    fn qkv(ll_max: usize) -> Steps {
        let mut st = Steps::new(ll_max);
        let emb = out(100, 0, false).w;
        let input = Input::EmbedRmsNorm {
            emb,
            w: 0x80,
            eps: 1e-5,
        };
        st.matvec(
            &[
                out(64, 0x20, false),
                out(16, 0x30, false),
                out(16, 0x40, false),
            ],
            64,
            input,
        );
        st
    }

    /// A layer's steps as the model builds them: q/k/v, attention, wo, gate/up, down, head.
    fn layer(ll_max: usize, n_ff: usize) -> Steps {
        let (x, q, k, v, att, gate, logits) = (0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70);
        let mut st = qkv(ll_max);
        st.attention((q, k, v), (0x90, 0xa0), att, 64);
        st.residual(&out(64, x, true), 64, Input::Plain(att));
        let norm = Input::RmsNorm(x, 0x80, 1e-5);
        st.gate_up(&out(n_ff, gate, false), &out(n_ff, gate, false), 64, norm);
        st.residual(&out(64, x, true), n_ff, Input::Plain(gate));
        st.matvec_plain(
            &[out(100, logits, false)],
            64,
            Input::RmsNorm(x, 0x80, 1e-5),
        );
        st
    }

    #[test]
    fn steps_read_what_earlier_steps_wrote() {
        let st = layer(2048, 256);
        assert!(st.bad.is_none(), "{:?}", st.bad);
        let ins: Vec<i32> = st.list.iter().map(|s| s.in_step).collect();
        // q/k/v from the embedding; attention from q/k/v; wo from attention; gate/up from x
        // after wo; down from gate/up; the head from x after down.
        assert_eq!(ins, [-1, 0, 1, 2, 3, 4]);
        let ll: Vec<(i32, i32, i32)> = st
            .list
            .iter()
            .map(|s| (s.in_ll, s.out_ll, s.arrive))
            .collect();
        assert_eq!(
            ll,
            [
                (0, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 1, 0),
                (1, 0, 0)
            ]
        );
        assert_eq!(st.min_rows(), 64, "wo and down have 64 rows");
        // The head outside the kernel (MOLLA_PK_HEAD=wide) reads x as the last down step left it.
        assert!(st.tagged(0x10));
        assert!(!layer(0, 256).tagged(0x10));
        assert!(!st.tagged(0x70), "the logits are plain");
    }

    #[test]
    fn a_folded_wo_hands_its_accumulator_to_gate_up_through_a_counter() {
        let (x, q, k, v, gate, acc) = (0x10, 0x20, 0x30, 0x40, 0x60, 0x100);
        let mut st = qkv(2048);
        st.attention_wo((q, k, v), (0x90, 0xa0), &out(64, acc, false), 64);
        let ffn_in = Input::FoldRmsNorm {
            acc,
            w: 0x80,
            eps: 1e-5,
        };
        st.gate_up(&out(256, gate, false), &out(256, gate, false), 64, ffn_in);
        st.residual(&out(64, x, true), 256, Input::Plain(gate));
        assert!(st.bad.is_none(), "{:?}", st.bad);
        let a = &st.list[1];
        assert_eq!((a.op, a.cols, a.rows[0], a.y[0]), (OP_ATTN_WO, 64, 64, acc));
        // Plain output with a counter; gate/up waits for it and reads x + the accumulator.
        assert_eq!((a.out_ll, a.arrive), (0, 1));
        let g = &st.list[2];
        assert_eq!(
            (g.prep, g.x, g.in_step, g.in_ll),
            (PREP_FOLD_RMSNORM, acc, 1, 0)
        );
        assert_eq!(st.list[3].in_step, 2);
    }

    #[test]
    fn steps_are_packed_when_every_block_s_rows_fit() {
        // Rows of 68 bytes (Q8_0, 64 columns); 4 blocks. q/k/v: 96 rows, 24 a block, spanning
        // up to two segments: 24 * 68 + 2 * 32 = 1696 bytes at most. gate/up: 256 pairs, 64 a
        // block: 2 * (64 * 68 + 32) = 8768. The head: 100 rows, 25 a block: 1732.
        let mut st = layer(2048, 256);
        mark_packed(&mut st.list, 4, 1700);
        let packed: Vec<i32> = st.list.iter().map(|s| s.packed).collect();
        // wo and down: 16 rows a block (1120 bytes) fit; attention is never packed.
        assert_eq!(packed, [1, 0, 1, 0, 1, 0]);
        mark_packed(&mut st.list, 4, 8768);
        let packed: Vec<i32> = st.list.iter().map(|s| s.packed).collect();
        assert_eq!(packed, [1, 0, 1, 1, 1, 1]);
        mark_packed(&mut st.list, 4, 1000);
        assert!(st.list.iter().all(|s| s.packed == 0));
    }

    #[test]
    fn a_kernel_built_for_some_types_takes_only_steps_of_those() {
        let st = layer(2048, 256);
        // Every matrix of the test layer is Q8_0 (type 8).
        assert!(
            st.list
                .iter()
                .filter(|s| s.op == 0)
                .all(|s| types_in(s, 1 << 8))
        );
        assert!(!types_in(&st.list[0], 1 << 3));
        use gguf::GgmlType as G;
        let named = [
            G::Q4_0,
            G::Q4_1,
            G::Q5_0,
            G::Q5_1,
            G::Q8_0,
            G::Q4_K,
            G::Q5_K,
            G::Q6_K,
        ];
        // pk_types admits exactly these (launch::is_q16).
        let q16 = (0..64)
            .filter(|&t| launch::is_q16(t))
            .fold(0, |m, t| m | 1u64 << t);
        assert_eq!(named.iter().fold(0, |m, t| m | 1u64 << t.id()), q16);
    }

    #[test]
    fn wide_outputs_go_plain_with_a_counter() {
        // gate/up writes 4096 values: over ll_max, so plain with arrivals, and down reads it so.
        let st = layer(2048, 4096);
        assert!(st.bad.is_none());
        let (gu, down) = (&st.list[3], &st.list[4]);
        assert_eq!((gu.out_ll, gu.arrive), (0, 1));
        assert_eq!((down.in_ll, down.in_step), (0, 3));
        // Everything plain when ll_max is 0; the logits never need a counter.
        let st = layer(0, 256);
        assert!(st.list[..5].iter().all(|s| s.out_ll == 0 && s.arrive == 1));
        assert_eq!((st.list[5].out_ll, st.list[5].arrive), (0, 0));
    }

    #[test]
    fn a_read_of_an_unwritten_buffer_or_a_stray_accumulate_is_refused() {
        let mut st = Steps::new(2048);
        st.matvec(&[out(64, 0x20, false)], 64, Input::Plain(0x99));
        assert!(st.bad.is_some());
        let mut st = Steps::new(2048);
        let emb = out(100, 0, false).w;
        st.matvec(
            &[out(64, 0x20, true)],
            64,
            Input::EmbedRmsNorm {
                emb,
                w: 0,
                eps: 0.0,
            },
        );
        assert!(
            st.bad.is_some(),
            "an accumulating step that is not a residual one"
        );
    }

    #[test]
    fn step_and_args_match_the_cuda_layout() {
        assert_eq!(std::mem::offset_of!(PkStep, out), 136);
        assert_eq!(std::mem::offset_of!(PkStep, rows), 144);
        assert_eq!(std::mem::offset_of!(PkStep, op), 192);
        assert_eq!(std::mem::offset_of!(PkStep, eps), 228);
        assert_eq!(std::mem::offset_of!(PkStep, res_smem), 232);
        assert_eq!(std::mem::offset_of!(PkStep, out_ll), 240);
        assert_eq!(std::mem::offset_of!(PkStep, arrive), 248);
        assert_eq!(size_of::<PkStep>(), 256);
        assert_eq!(std::mem::offset_of!(PkArgs, counters), 40);
        assert_eq!(std::mem::offset_of!(PkArgs, nsteps), 48);
        assert_eq!(std::mem::offset_of!(PkArgs, epoch), 64);
        assert_eq!(std::mem::offset_of!(PkArgs, scale), 92);
        assert_eq!(std::mem::offset_of!(PkArgs, xq_off), 116);
        assert_eq!(std::mem::offset_of!(PkArgs, l2_ahead), 124);
        assert_eq!(std::mem::offset_of!(PkArgs, fold_acc), 128);
        assert_eq!(std::mem::offset_of!(PkArgs, fold_n), 136);
        assert_eq!(size_of::<PkArgs>(), 144);
    }
}
