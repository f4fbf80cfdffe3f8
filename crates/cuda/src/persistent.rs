//! One launch a token: the persistent decode kernel's launch and its buffers, for a step list
//! built once per cache (persistent/steps.rs). See docs/cuda-persistent.md for the design and
//! measurements.

use crate::device::Gpu;
use crate::error::{CudaError, Result, drv};
use crate::launch::{self, Heads};
use cudarc::driver::{CudaFunction, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

mod blocks;
mod config;
mod steps;
use config::{
    blocks_per_sm_cap, chunk_bytes, delay_knobs, env_i32, l2_ahead, mark_packed, skip_knobs,
    stages, types_in,
};
pub(crate) use config::{legpad_forced, ll_max, pk_build, pk_lacks};
pub(crate) use steps::{Input, Steps};
use steps::{OP_ATTN_WO, OP_MATVEC, PkStep};

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
    tok_src: u64,
}

// SAFETY: as for PkStep.
unsafe impl DeviceRepr for PkArgs {}

/// The token a persistent launch decodes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Token {
    /// This id.
    Id(u32),
    /// The greedy pick at this device address (the pick kernel's words: status, then index),
    /// written by a launch before this one on the stream: greedy decoding chained on the device
    /// (forward/chain.rs). A pick that is not a token gives no embedding row.
    Picked(u64),
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
    /// The packed kernel built for short caches (`Gpu::persistent_short`; on by default since
    /// session 37, +1.6-3.1% on SmolLM2 in process; `MOLLA_PK_SHORT=0` turns it off) and the
    /// positions it takes: it runs a step at `pos` when pos + 1 is at most that.
    short: Option<(CudaFunction, usize)>,
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
    /// Threads a block (`PkBuild::block_threads`, read once: it parses `MOLLA_KDEFS`).
    threads: u32,
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
    /// With wo folded into attention (`PkBuild::fold`): the accumulators' address and
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
        if let Some(t) = gpu.pk_build.emb
            && let Some(st) = steps
                .list
                .iter()
                .find(|s| s.prep == steps::PREP_EMBED_RMSNORM)
            && st.emb_ty != t as i32
        {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: the kernel was built for embeddings of type {t}, not {}",
                st.emb_ty
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
        // A folded build ends attention steps with ENDARRIVE's split barrier, sound only when
        // every block has a head there (kernels/persistent_steps.cuh `PK_END_FULL`).
        if gpu.pk_build.fold && steps.list.iter().any(|s| s.op == steps::OP_ATTN) {
            return Err(CudaError::Unsupported(
                "persistent decode: an unfolded attention step, and a kernel built for folded ones"
                    .into(),
            ));
        }
        let fused = |s: &steps::PkStep| {
            s.prep == steps::PREP_FUSED || s.ty[..2].contains(&crate::fused::T_W16)
        };
        if !gpu.pk_build.fuse && steps.list.iter().any(fused) {
            return Err(CudaError::Unsupported(
                "persistent decode: fused q/k/v steps, and a kernel not built for them".into(),
            ));
        }
        if let Some(roles) = gpu.pk_build.roles
            && let Some(st) = steps.list.iter().find(|s| !config::roles_in(s, roles))
        {
            return Err(CudaError::Unsupported(format!(
                "persistent decode: the kernel was built for role types {roles:?}, a step has {:?}",
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
        let threads = gpu.pk_build.block_threads();
        let f = &gpu.k.decode_persistent;
        let occ = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
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
        // MOLLA_KDEFS=A2WORDS's row decoders read up to 4 bytes past a row: 16 bytes left free.
        let overread = if crate::compile::experiment("A2WORDS") {
            16
        } else {
            0
        };
        let all_packed = mark_packed(
            &mut steps.list,
            grid as usize,
            stages * (chunk + 64) - overread,
        );
        // A kernel variant that fits as many blocks on an SM.
        let fits = |p: &&CudaFunction| {
            p.occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
                .is_ok_and(|o| o >= per_sm)
        };
        // Every matvec step packed: the kernel without the chunked pipeline, when it loads and
        // fits as many blocks on an SM.
        let packed = all_packed
            .then(|| gpu.persistent_packed())
            .flatten()
            .filter(fits);
        let packed_build = packed.is_some();
        let f = packed.unwrap_or(f).clone();
        let short = if packed_build && env_i32("MOLLA_PK_SHORT", 1) != 0 {
            let n = short_positions(&steps.list, h, grid as usize, stages * (chunk + 64));
            (n > 0)
                .then(|| gpu.persistent_short())
                .flatten()
                .filter(fits)
                .map(|p| (p.clone(), n))
        } else {
            None
        };
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
            short,
            trace,
            ops: steps.list.iter().map(|s| s.op).collect(),
            ll,
            counters: gpu.zeros(steps.list.len())?,
            blks: gpu.upload(&blocks::table(&steps.list, grid as usize, h.n_head))?,
            steps: gpu.upload(&steps.list)?,
            nsteps: steps.list.len(),
            epoch: 0,
            grid,
            smem: smem as u32,
            threads,
            chunk,
            xs_bytes,
            xq_off,
            stages,
            nw_bytes,
            knobs: env_i32("MOLLA_PK_NAP", 0).clamp(0, 255) << 8 | skip_knobs() | delay_knobs(),
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

    /// The positions (pos + 1) up to which it runs the kernel built for short caches, if any.
    pub fn short_positions(&self) -> Option<usize> {
        self.short.as_ref().map(|s| s.1)
    }

    /// Launches one decode step of `token` at `pos`. `err` is a device u32 that must be 0; the
    /// kernel stores a nonzero value there when a wait timed out.
    ///
    /// # Safety
    /// Every address in the step list is live; `err` and `freqs` are device addresses of this
    /// model and cache; a [`Token::Picked`] address holds the pick kernel's words, written
    /// before this launch in stream order.
    pub unsafe fn launch(
        &mut self,
        gpu: &Gpu,
        h: &Heads,
        (token, pos): (Token, usize),
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
            token: match token {
                Token::Id(t) => t,
                Token::Picked(_) => 0,
            },
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
            scale: h.scale,
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
            tok_src: match token {
                Token::Id(_) => 0,
                Token::Picked(a) => a,
            },
        };
        let f = match &self.short {
            Some((f, n)) if pos < *n => f,
            _ => &self.f,
        };
        let mut b = gpu.stream.launch_builder(f);
        b.arg(&a);
        launch::count_launch();
        launch::timeline_mark(gpu, "gpu.k.decode_persistent", "persistent launch");
        let cfg = LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (self.threads, 1, 1),
            shared_mem_bytes: self.smem,
        };
        // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
        unsafe { b.launch(cfg) }.map_err(drv("persistent launch"))?;
        Ok(())
    }
}

/// The cache positions (pos + 1, at most the attention tile) whose keys and values every
/// attention step of `list` stages in `bufs` bytes of chunk buffers, as the kernel's
/// `pk_kv_staged` decides, with `grid` blocks over `h`'s heads: the positions the kernel built
/// for short caches can take (0: none).
fn short_positions(list: &[PkStep], h: &Heads, grid: usize, bufs: usize) -> usize {
    let (hd, hdv, nkv) = (h.head_dim, h.head_dim_v, h.n_head_kv);
    let (rowk, rowv) = (2 * hd, 2 * hdv);
    let aligned = h.n_head <= grid
        && rowk % 16 == 0
        && rowv % 16 == 0
        && (2 * nkv * hd) % 16 == 0
        && (2 * nkv * hdv) % 16 == 0
        && list
            .iter()
            .filter(|s| s.op != OP_MATVEC)
            .all(|s| (s.kc | s.vc) % 16 == 0);
    if !aligned {
        return 0;
    }
    let fits = |n: usize| (n * rowk).next_multiple_of(16) + n * rowv <= bufs;
    (1..=launch::att_tile())
        .rev()
        .find(|&n| fits(n))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_cuda_layout() {
        assert_eq!(std::mem::offset_of!(PkArgs, counters), 40);
        assert_eq!(std::mem::offset_of!(PkArgs, nsteps), 48);
        assert_eq!(std::mem::offset_of!(PkArgs, epoch), 64);
        assert_eq!(std::mem::offset_of!(PkArgs, scale), 92);
        assert_eq!(std::mem::offset_of!(PkArgs, xq_off), 116);
        assert_eq!(std::mem::offset_of!(PkArgs, l2_ahead), 124);
        assert_eq!(std::mem::offset_of!(PkArgs, fold_acc), 128);
        assert_eq!(std::mem::offset_of!(PkArgs, fold_n), 136);
        assert_eq!(std::mem::offset_of!(PkArgs, tok_src), 144);
        assert_eq!(size_of::<PkArgs>(), 152);
    }

    /// The positions the short-cache kernel takes: a whole tile when the keys and values fit
    /// (SmolLM2's heads), fewer when they do not, none when the kernel would not stage them.
    #[test]
    fn short_positions_follow_the_kernels_staging() {
        let h = Heads {
            n_head: 9,
            n_head_kv: 3,
            head_dim: 64,
            head_dim_v: 64,
            n_rot: 64,
            neox: false,
            scale: 0.125,
            window: 0,
            softcap: 0.0,
        };
        let attn = PkStep {
            op: OP_ATTN_WO,
            kc: 0x1000,
            vc: 0x9000,
            ..PkStep::default()
        };
        let list = [PkStep::default(), attn];
        let tile = launch::att_tile();
        // 128 bytes a position for the keys, as many for the values.
        assert_eq!(short_positions(&list, &h, 132, 200 << 10), tile);
        assert_eq!(short_positions(&list, &h, 132, 256 * 100), 100);
        assert_eq!(short_positions(&list, &h, 132, 255), 0);
        assert_eq!(
            short_positions(&list, &h, 8, 200 << 10),
            0,
            "more heads than blocks"
        );
        let odd = PkStep { vc: 0x9008, ..attn };
        assert_eq!(
            short_positions(&[odd], &h, 132, 200 << 10),
            0,
            "unaligned values"
        );
        let h80 = Heads {
            head_dim: 36,
            head_dim_v: 36,
            ..h
        };
        assert_eq!(
            short_positions(&list, &h80, 132, 200 << 10),
            0,
            "rows of 72 bytes"
        );
    }
}
