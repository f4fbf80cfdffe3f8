//! Raw kernel launches on device addresses. Callers guarantee that every address is a live
//! allocation of this device holding at least the elements the shapes imply; the safe entry
//! points are `CudaModel::forward` and the host-in/host-out wrappers in `testing`.

use crate::device::Gpu;
use crate::error::{Result, drv};
use crate::pdl::launch_dep;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

mod attention;
mod elementwise;
mod fused;
mod skip;
mod split;
pub use attention::Heads;
pub(crate) use attention::{
    KvAt, KvRow, att_stage_bytes, attention, rope_attention, rope_attention_on, rope_store,
};
pub(crate) use elementwise::{add_branch, gather_rows, glu, scale_cap};
pub(crate) use fused::{att_prep_on, prepare};
pub(crate) use skip::Skip;
pub use split::att_tile;
pub(crate) use split::{AttSplit, SplitScratch, split_blocks};

/// A weight matrix on the device, in its GGUF block layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WeightRef {
    pub ptr: u64,
    /// ggml type id.
    pub ty: i32,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

/// One weight matrix of a fused matvec (kernels/matvec.cu `MvSeg`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MvSeg {
    w: u64,
    bias: u64,
    y: u64,
    rows: i32,
    row_bytes: i32,
    ty: i32,
    accumulate: i32,
}

/// Arguments of the matvec kernel (kernels/matvec.cu `MvArgs`), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MvArgs {
    seg: [MvSeg; 3],
    nseg: i32,
    cols: i32,
    x: u64,
    x2: u64,
    norm_w: u64,
    eps: f32,
    mode: i32,
    lanes: i32,
}

// SAFETY: plain #[repr(C)] data whose layout matches the CUDA struct (checked in tests below).
unsafe impl DeviceRepr for MvArgs {}

/// How the matvec prepares its input row.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Prep {
    /// x as given.
    Plain,
    /// rmsnorm(x) * w (address of `cols` weights), with epsilon.
    RmsNorm(u64, f32),
    /// silu(x) * up (address of `cols` values).
    SwiGlu(u64),
    /// gelu_tanh(x) * up (gemma's GeGLU), as `SwiGlu`.
    GeGlu(u64),
    /// RMSNorm as `RmsNorm`, of x held as the persistent kernel's tagged words (8 bytes a value,
    /// the value in the low half): `matvec_wide` only.
    RmsNormTagged(u64, f32),
    /// Already quantized into the buffer `matvec_wide` reads, by the kernel before (launch/
    /// fused.rs): `matvec_wide` only, and no preparation launch.
    Ready,
}

impl Prep {
    /// Whether the kernel before prepared the input (no preparation launch).
    pub(crate) fn is_ready(self) -> bool {
        matches!(self, Prep::Ready)
    }
}

/// An output of a fused matvec: y = W·x (+ bias) (+ y when accumulating).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    pub w: WeightRef,
    pub y: u64,
    pub bias: u64,
    pub accumulate: bool,
    /// With `accumulate`: each row summed in fixed point (kernels/matvec.cu `mv_store_fx`), as
    /// the persistent kernel's wo folded into attention sums it; legacy q16 formats, alone in
    /// their launch, without bias. Prefill (`matmul`) ignores it.
    pub fixed: bool,
}

thread_local! {
    static LAUNCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

thread_local! {
    /// The kernel timeline while one is recorded (testing::timeline): a timing event recorded on
    /// the stream before each kernel `launch_dep!` launches, with the kernel's name.
    static TIMELINE: std::cell::RefCell<Option<Vec<(&'static str, cudarc::driver::CudaEvent)>>> =
        const { std::cell::RefCell::new(None) };
}

/// Records a timeline mark on `gpu`'s stream when a timeline is being recorded on this thread (a
/// mark that cannot be made is left out), named by the kernel's field in `name` (`&gpu.k.matvec`:
/// `matvec`), or where `name` is a local variable by `what`'s first word ("rope launch": `rope`).
pub(crate) fn timeline_mark(gpu: &Gpu, name: &'static str, what: &'static str) {
    let name = match name.rsplit_once('.') {
        Some((_, field)) => field,
        None => what.split(' ').next().unwrap_or(what),
    };
    TIMELINE.with(|t| {
        if let Some(marks) = t.borrow_mut().as_mut()
            && let Ok(e) = gpu
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            && e.record(&gpu.stream).is_ok()
        {
            marks.push((name, e));
        }
    })
}

/// Starts (`Some`) or takes (`None` in, the marks out) this thread's kernel timeline.
pub(crate) fn timeline_swap(
    marks: Option<Vec<(&'static str, cudarc::driver::CudaEvent)>>,
) -> Option<Vec<(&'static str, cudarc::driver::CudaEvent)>> {
    TIMELINE.with(|t| std::mem::replace(&mut *t.borrow_mut(), marks))
}

/// Counts one launch from the host (a kernel, or a CUDA graph replay), on the calling thread.
pub(crate) fn count_launch() {
    LAUNCHES.with(|c| c.set(c.get() + 1));
}

/// Launches issued from the calling thread so far.
pub(crate) fn launch_count() -> u64 {
    LAUNCHES.with(std::cell::Cell::get)
}

fn cfg(grid: (u32, u32, u32), block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// Lanes per output row of the decode matvec: a full warp (fewest dependent load rounds), or with
/// `MOLLA_MV_LANES=even` the largest power of two (8..=32) that splits the row's 8-weight chunks
/// evenly (no idle lanes, more rounds), or a fixed 8, 16 or 32. Read once.
pub(crate) fn matvec_lanes(cols: usize) -> i32 {
    static MODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let mode = MODE.get_or_init(|| std::env::var("MOLLA_MV_LANES").unwrap_or_default());
    match mode.as_str() {
        "even" => even_lanes(cols),
        "8" => 8,
        "16" => 16,
        _ => 32,
    }
}

/// The largest power of two (8..=32) dividing the number of 8-weight chunks, else 32.
pub(crate) fn even_lanes(cols: usize) -> i32 {
    match (cols / 8).trailing_zeros() {
        5.. => 32,
        4 => 16,
        3 => 8,
        _ => 32,
    }
}

const MV_THREADS: u32 = 128;

/// Threads of a `matvec_wide` block (kernels/matvec.cu: launch bounds 256, four blocks an SM).
const WIDE_THREADS: u32 = 256;

/// Whether a single-row decode matvec over `outs` goes through `matvec_wide`: every matrix in a
/// format q16.cuh decodes, and at least `MOLLA_MV_WIDE` bytes in all (default 4 MiB: below that
/// the extra launch for the input costs more than the wider kernel saves). Read once.
fn wide(outs: &[Out]) -> bool {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let min = *MIN.get_or_init(|| {
        std::env::var("MOLLA_MV_WIDE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4 << 20)
    });
    let bytes: usize = outs.iter().map(|o| o.w.rows * o.w.row_bytes).sum();
    bytes >= min && outs.iter().all(|o| is_q16(o.w.ty))
}

/// The ggml types the q16 row decoders cover (kernels/q16.cuh).
pub(crate) fn is_q16(ty: i32) -> bool {
    is_q16_legacy(ty) || matches!(ty, 12..=14)
}

/// The q16 types whose unit is one self-contained block of 32 weights (Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0; kernels/q16.cuh `unit_legacy`).
pub(crate) fn is_q16_legacy(ty: i32) -> bool {
    matches!(ty, 2 | 3 | 6 | 7 | 8)
}

/// Inputs a batched matvec block prepares at most (kernels/matvec.cu `MV_MULTI`).
const MV_MULTI: usize = 8;

/// Shared memory a batched matvec block aims to stay within.
const MULTI_SMEM: usize = 48 * 1024;

/// Shared-memory bytes of an input row of `cols` values quantized to 16 bits (kernels/q16.cuh
/// `xq_bytes`): i16 quants, a scale and a sum per 32, a quant sum per 16.
pub(crate) fn xq_bytes(cols: usize) -> usize {
    ((2 * cols).next_multiple_of(128) + cols / 8 + cols / 8 + cols / 4).next_multiple_of(16)
}

/// Fused decode matvec over up to three matrices sharing the input `x` (`cols` values).
///
/// # Safety
/// See the module docs; every `Out` matrix has `cols` columns, `cols * 4 + xq_bytes(cols)` bytes
/// fit shared memory.
pub(crate) unsafe fn matvec(
    gpu: &Gpu,
    outs: &[Out],
    cols: usize,
    x: u64,
    prep: Prep,
) -> Result<()> {
    // SAFETY: as the caller guarantees.
    unsafe { matvec_rows(gpu, outs, cols, x, prep, Rows::ONE) }
}

/// How many input rows a decode matvec takes: one, or one token of each of `n` sequences, with
/// `prep` a device buffer of `n * prep_stride(cols)` bytes for the prepared inputs (for one row
/// it may be 0; with a buffer, big matrices go through `matvec_wide`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    pub n: usize,
    pub prep: u64,
}

impl Rows {
    pub const ONE: Rows = Rows { n: 1, prep: 0 };
}

/// Widest matvec / matmul input of a model with these hyper-parameters.
pub(crate) fn max_cols(hp: &model::HParams) -> usize {
    hp.n_embd.max(hp.n_ff).max(hp.n_head * hp.head_dim_v)
}

/// Bytes one prepared input row of `cols` values takes: the f32 row, its q16 quantization, then
/// 16 bytes for its RMSNorm scale (kernels/matvec.cu `prep_scale_off`: outputs are dot products
/// times that scale).
pub(crate) fn prep_stride(cols: usize) -> usize {
    cols * 4 + xq_bytes(cols) + 16
}

/// The matvec kernels' arguments for `outs` on input `x` (`cols` values), and the rows in all.
fn mv_args(outs: &[Out], cols: usize, x: u64, prep: Prep) -> (MvArgs, usize) {
    let mut a = MvArgs {
        cols: cols as i32,
        x,
        lanes: matvec_lanes(cols),
        ..MvArgs::default()
    };
    match prep {
        Prep::Plain | Prep::Ready => {}
        Prep::RmsNorm(w, eps) => (a.mode, a.norm_w, a.eps) = (1, w, eps),
        Prep::SwiGlu(up) => (a.mode, a.x2) = (2, up),
        Prep::GeGlu(up) => (a.mode, a.x2) = (4, up),
        Prep::RmsNormTagged(w, eps) => (a.mode, a.norm_w, a.eps) = (3, w, eps),
    }
    let mut total = 0usize;
    for (s, o) in a.seg.iter_mut().zip(outs.iter().take(3)) {
        *s = MvSeg {
            w: o.w.ptr,
            bias: o.bias,
            y: o.y,
            rows: o.w.rows as i32,
            row_bytes: o.w.row_bytes as i32,
            ty: o.w.ty,
            accumulate: i32::from(o.accumulate) + i32::from(o.accumulate && o.fixed),
        };
        total += o.w.rows;
    }
    a.nseg = outs.len().min(3) as i32;
    (a, total)
}

/// Whether `a`'s rows are fixed-point ones (kernels/matvec.cu `mv_fx`): the `_fx` kernels.
fn mv_fixed(a: &MvArgs) -> bool {
    a.nseg == 1 && a.seg[0].accumulate == 2
}

/// `matvec_prep_wide` of `a`'s input (`cols` values) into `buf`, 1024 values a block.
///
/// # Safety
/// As [`matvec_wide`].
unsafe fn prep_wide(gpu: &Gpu, a: &MvArgs, cols: usize, buf: u64) -> Result<()> {
    let prep_cfg = cfg(
        (cols.div_ceil(1024) as u32, 1, 1),
        MV_THREADS,
        (cols * 4) as u32,
    );
    // SAFETY: the caller guarantees the addresses and the buffer's size.
    unsafe { launch_dep!(gpu, &gpu.k.matvec_prep_wide, prep_cfg, "matvec launch"; a, &buf) }
}

/// Whether [`matvec_rows`] runs `outs` on a `cols`-wide input through `matvec_wide`: one row, a
/// preparation buffer, 32 lanes a row, and matrices [`wide`] takes.
pub(crate) fn goes_wide(outs: &[Out], cols: usize, rows: Rows) -> bool {
    rows.n == 1 && rows.prep != 0 && matvec_lanes(cols) == 32 && wide(outs)
}

/// [`matvec`] through `matvec_wide`: the input prepared once into `buf` (`prep_stride(cols)`
/// bytes) by `matvec_prep_wide` (1024 values a block), then four blocks an SM on it. The same
/// bits as `matvec` (32 lanes a row); every matrix must be in a format q16.cuh decodes.
///
/// # Safety
/// As [`matvec`], with `buf` holding `prep_stride(cols)` bytes.
pub(crate) unsafe fn matvec_wide(
    gpu: &Gpu,
    outs: &[Out],
    cols: usize,
    x: u64,
    prep: Prep,
    buf: u64,
) -> Result<()> {
    // SAFETY: as the caller guarantees.
    unsafe { matvec_wide_flag(gpu, outs, WideIn { cols, x, prep, buf }, None) }
}

/// [`matvec_wide`], with `flag` = Some((src, dst)): the word at device address `src` (the
/// persistent kernel's error flag) copied to `dst` by the launch too, and the output (one plain
/// matrix: a head into mapped host memory) stored in coalesced runs of rows (`matvec_wide_host`).
///
/// # Safety
/// As [`matvec_wide`]; `src` and `dst` are addresses of a word the launch may read and write.
pub(crate) unsafe fn matvec_wide_flag(
    gpu: &Gpu,
    outs: &[Out],
    input: WideIn,
    flag: Option<(u64, u64)>,
) -> Result<()> {
    let (cols, buf) = (input.cols, input.buf);
    // With the flag, the kernel takes its one plain segment as a head into host memory
    // (kernels/matvec.cu wide_rows_host).
    let head = |o: &Out| o.bias == 0 && !o.accumulate && !o.fixed;
    if flag.is_some() && !(outs.len() == 1 && head(&outs[0])) {
        return Err(crate::error::CudaError::Unsupported(
            "a flagged wide matvec of other than one plain matrix".into(),
        ));
    }
    if !outs.iter().all(|o| is_q16(o.w.ty)) || !cols.is_multiple_of(32) {
        return Err(crate::error::CudaError::Unsupported(
            "wide matvec of a format without q16 decoding".into(),
        ));
    }
    if let (None, Some(f), Prep::RmsNorm(..)) = (flag, &gpu.k.matvec_wide_norm, input.prep) {
        // MOLLA_KDEFS=WIDEPREP: every block prepares the input (kernels/matvec.cu
        // matvec_wide_norm), no preparation launch.
        let smem = cols * 4 + xq_bytes(cols);
        if smem <= gpu.max_smem {
            let (a, total) = mv_args(outs, cols, input.x, input.prep);
            let cfg = cfg((wide_blocks(gpu, total), 1, 1), WIDE_THREADS, smem as u32);
            // SAFETY: the caller guarantees the addresses; the argument layout matches.
            return unsafe { launch_dep!(gpu, f, cfg, "matvec launch"; &a) };
        }
    }
    // SAFETY: as the caller guarantees.
    let (a, blocks) = unsafe { wide_setup(gpu, outs, input) }?;
    let cfg = cfg((blocks, 1, 1), WIDE_THREADS, xq_bytes(cols) as u32);
    // SAFETY: the caller guarantees the addresses; the argument layouts match the kernels.
    unsafe {
        match flag {
            Some((src, dst)) => {
                launch_dep!(gpu, &gpu.k.matvec_wide_host, cfg, "matvec launch"; &a, &buf, &src, &dst)
            }
            None => launch_dep!(gpu, &gpu.k.matvec_wide, cfg, "matvec launch"; &a, &buf),
        }
    }
}

/// The input of a `matvec_wide`-shaped launch: `cols` values at `x`, prepared by `prep` into
/// `buf` (`prep_stride(cols)` bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WideIn {
    pub cols: usize,
    pub x: u64,
    pub prep: Prep,
    pub buf: u64,
}

/// The most blocks a `matvec_wide`-shaped launch takes: four an SM, all its registers allow.
pub(crate) fn wide_max_blocks(gpu: &Gpu) -> usize {
    4 * gpu.sm_count
}

/// The grid of a `matvec_wide`-shaped launch over `total` rows: a warp a row, four blocks an SM
/// at most.
fn wide_blocks(gpu: &Gpu, total: usize) -> u32 {
    total
        .div_ceil(WIDE_THREADS as usize / 32)
        .clamp(1, wide_max_blocks(gpu)) as u32
}

/// The arguments and grid of a `matvec_wide`-shaped launch over `outs` (a warp a row, four
/// blocks an SM at most), with the input's preparation launched first unless it is ready.
///
/// # Safety
/// As [`matvec_wide`].
pub(crate) unsafe fn wide_setup(gpu: &Gpu, outs: &[Out], input: WideIn) -> Result<(MvArgs, u32)> {
    let WideIn { cols, x, prep, buf } = input;
    let (a, total) = mv_args(outs, cols, x, prep);
    let blocks = wide_blocks(gpu, total);
    // Fixed-point rows read the caller's f32 row itself (kernels/matvec.cu wide_rows): nothing
    // to prepare (the kernel's copy of the prepared row is then of bytes nothing reads).
    if !prep.is_ready() && !mv_fixed(&a) {
        // SAFETY: the caller guarantees the addresses and the buffer's size.
        unsafe { prep_wide(gpu, &a, cols, buf) }?;
    }
    Ok((a, blocks))
}

/// [`matvec_wide`] of one plain matrix (a head: no bias, no accumulation, not fixed point) with
/// the greedy pick of its output made by the same grid (kernels/pick.cu `matvec_wide_pick`) into
/// `pick`, in `pick_greedy`'s words; with `flag`, the word after the output (the persistent
/// kernel's error flag) goes with them, and to `host` too unless it is 0 (four words of mapped
/// page-locked memory, `forward/chain.rs`). The output's bits are `matvec_wide`'s.
///
/// # Safety
/// As [`matvec_wide`]; `pick`'s ticket (its fifth word) is zero, as the pick kernels leave it;
/// `host` is 0 or the device address of four words of mapped host memory.
pub(crate) unsafe fn matvec_wide_pick(
    gpu: &Gpu,
    out: Out,
    input: WideIn,
    flag: bool,
    pick: &CudaSlice<f32>,
    host: u64,
) -> Result<()> {
    let (cols, buf) = (input.cols, input.buf);
    if !is_q16(out.w.ty) || !cols.is_multiple_of(32) || out.bias != 0 || out.accumulate || out.fixed
    {
        return Err(crate::error::CudaError::Unsupported(
            "a picked wide matvec of other than a plain q16 matrix".into(),
        ));
    }
    let most = pick_wide_words(wide_max_blocks(gpu));
    if pick.len() < most {
        return Err(crate::error::CudaError::Length {
            what: "pick buffer",
            got: pick.len(),
            expected: most,
        });
    }
    let (flag, pick) = (i32::from(flag), gpu.ptr(pick));
    // SAFETY: as the caller guarantees.
    let (a, blocks) = unsafe { wide_setup(gpu, &[out], input) }?;
    let cfg = cfg((blocks, 1, 1), WIDE_THREADS, xq_bytes(cols) as u32);
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel; the
    // pick buffer holds the grid's words (checked above).
    unsafe {
        launch_dep!(gpu, &gpu.k.matvec_wide_pick, cfg, "matvec launch"; &a, &buf, &flag, &pick, &host)
    }
}

/// Words `matvec_wide_pick` needs in its pick buffer over `blocks` blocks: the result, the
/// ticket, three a block.
pub(crate) fn pick_wide_words(blocks: usize) -> usize {
    5 + 3 * blocks
}

/// [`matvec`] for `rows.n` input rows (`x`: n rows of `cols`; `Prep::SwiGlu`'s second input
/// alike), one token of each of n sequences: output row t of each matrix goes to `y + t * rows`,
/// with the bits `matvec` gives that input alone. Several rows take two launches: each input
/// prepared once (`matvec_prep`, into `rows.prep`), then the rows of every matrix read once for
/// up to 8 inputs (`matvec_multi`).
///
/// # Safety
/// As [`matvec`], with `n` rows in every input and output buffer and, for n > 1, `rows.prep`
/// holding `n * prep_stride(cols)` bytes.
pub(crate) unsafe fn matvec_rows(
    gpu: &Gpu,
    outs: &[Out],
    cols: usize,
    x: u64,
    prep: Prep,
    rows: Rows,
) -> Result<()> {
    let n = rows.n;
    if let Prep::RmsNormTagged(..) = prep {
        return Err(crate::error::CudaError::Unsupported(
            "a tagged input outside matvec_wide".into(),
        ));
    }
    if prep.is_ready() && !goes_wide(outs, cols, rows) {
        return Err(crate::error::CudaError::Unsupported(
            "a prepared input outside matvec_wide".into(),
        ));
    }
    let (a, total) = mv_args(outs, cols, x, prep);
    let rows_per_block = MV_THREADS as usize / a.lanes as usize;
    let smem = prep_stride(cols);
    if n > 1 {
        if rows.prep == 0 {
            return Err(crate::error::CudaError::Unsupported(
                "batched matvec without its input buffer".into(),
            ));
        }
        let stride = smem as i32;
        let mut b = gpu.stream.launch_builder(&gpu.k.matvec_prep);
        b.arg(&a).arg(&rows.prep).arg(&stride);
        count_launch();
        // SAFETY: the caller guarantees the addresses and the buffer's size.
        unsafe { b.launch(cfg((n as u32, 1, 1), MV_THREADS, smem as u32)) }
            .map_err(drv("matvec launch"))?;
        // A block reads up to MV_MULTI prepared inputs (about 48 KiB of shared memory at most, so
        // that several blocks share an SM) and its rows once for all of them.
        let per_block = (MULTI_SMEM / smem).clamp(1, MV_MULTI);
        let groups = n.div_ceil(per_block);
        let blocks = total
            .div_ceil(rows_per_block)
            .clamp(1, (gpu.sm_count * 6).div_ceil(groups).max(8)) as u32;
        let (n32, per32) = (n as i32, per_block as i32);
        let f = if mv_fixed(&a) {
            &gpu.k.matvec_multi_fx
        } else {
            &gpu.k.matvec_multi
        };
        let mut b = gpu.stream.launch_builder(f);
        b.arg(&a).arg(&n32).arg(&per32).arg(&rows.prep).arg(&stride);
        count_launch();
        let cfg = cfg(
            (blocks, groups as u32, 1),
            MV_THREADS,
            (per_block * smem) as u32,
        );
        // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel.
        unsafe { b.launch(cfg) }.map_err(drv("matvec launch"))?;
        return Ok(());
    }
    if goes_wide(outs, cols, rows) {
        // SAFETY: as the caller guarantees; rows.prep holds prep_stride(cols) bytes.
        return unsafe { matvec_wide(gpu, outs, cols, x, prep, rows.prep) };
    }
    // Blocks stride over rows beyond this: each block prepares the input once, so a big head
    // (49152 rows) is not normalised 12288 times.
    let blocks = total.div_ceil(rows_per_block).clamp(1, gpu.sm_count * 6) as u32;
    let cfg = cfg((blocks, 1, 1), MV_THREADS, smem as u32);
    // SAFETY: the caller guarantees the addresses; the argument layout matches the kernel. (Two
    // launch sites: the timeline names a kernel by the expression launched.)
    if mv_fixed(&a) {
        unsafe { launch_dep!(gpu, &gpu.k.matvec_fx, cfg, "matvec launch"; &a) }
    } else {
        unsafe { launch_dep!(gpu, &gpu.k.matvec, cfg, "matvec launch"; &a) }
    }
}

/// Prefill matmul: `y[t][r] = W[r]·x[t]` (+ bias) (+ y), `n` rows of `x`.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn matmul(gpu: &Gpu, o: &Out, x: u64, n: usize) -> Result<()> {
    let w = o.w;
    let (ty, rows, cols, rb, n_i, acc) = (
        w.ty,
        w.rows as i32,
        w.cols as i32,
        w.row_bytes as i32,
        n as i32,
        i32::from(o.accumulate),
    );
    let grid = (w.rows.div_ceil(64) as u32, n.div_ceil(64) as u32, 1);
    let mut b = gpu.stream.launch_builder(&gpu.k.matmul);
    b.arg(&w.ptr)
        .arg(&ty)
        .arg(&rows)
        .arg(&cols)
        .arg(&rb)
        .arg(&x)
        .arg(&n_i)
        .arg(&o.y)
        .arg(&o.bias)
        .arg(&acc);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg(grid, 256, 0)) }.map_err(drv("matmul launch"))?;
    Ok(())
}

/// RMSNorm of `rows` rows of `n` values.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn rms_norm(
    gpu: &Gpu,
    x: u64,
    w: u64,
    out: u64,
    rows: usize,
    n: usize,
    eps: f32,
) -> Result<()> {
    let n_i = n as i32;
    let mut b = gpu.stream.launch_builder(&gpu.k.rms_norm);
    b.arg(&x).arg(&w).arg(&out).arg(&n_i).arg(&eps);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((rows as u32, 1, 1), 256, 0)) }.map_err(drv("rms_norm launch"))?;
    Ok(())
}

/// RMSNorm in place of `rows` rows of `n` values at `x`, each with the weights `w` (n values):
/// qwen3's per-head norms of q and k (a row a head).
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn rms_norm_inplace(
    gpu: &Gpu,
    x: u64,
    w: u64,
    rows: usize,
    n: usize,
    eps: f32,
) -> Result<()> {
    let n_i = n as i32;
    let mut b = gpu.stream.launch_builder(&gpu.k.rms_norm_inplace);
    b.arg(&x).arg(&w).arg(&n_i).arg(&eps);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((rows as u32, 1, 1), 128, 0)) }
        .map_err(drv("rms_norm_inplace launch"))?;
    Ok(())
}

/// Embedding rows of `n` token ids (device u32s) into `out`.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn embed(
    gpu: &Gpu,
    w: &WeightRef,
    tokens: u64,
    n: usize,
    out: u64,
) -> Result<()> {
    let (ty, rows, cols, rb) = (w.ty, w.rows as i32, w.cols as i32, w.row_bytes as i32);
    let cfg = cfg((n as u32, 1, 1), 128, 0);
    // SAFETY: as above.
    unsafe {
        launch_dep!(gpu, &gpu.k.embed, cfg, "embed launch"; &w.ptr, &ty, &rows, &cols, &rb, &tokens,
            &out)
    }
}

/// Grid for a grid-stride loop over `n` items, 256 threads a block.
pub(crate) fn stride_grid(gpu: &Gpu, n: usize) -> u32 {
    n.div_ceil(256).clamp(1, gpu.sm_count * 16) as u32
}

/// `out` (rows x cols f16) = the weight matrix `w` dequantized.
///
/// # Safety
/// See the module docs; `out` holds `w.rows * w.cols` u16s.
pub(crate) unsafe fn dequant_f16(gpu: &Gpu, w: &WeightRef, out: u64) -> Result<()> {
    let (ty, rows, cols, rb) = (w.ty, w.rows as i32, w.cols as i32, w.row_bytes as i32);
    let mut b = gpu.stream.launch_builder(&gpu.k.dequant_f16);
    b.arg(&w.ptr)
        .arg(&ty)
        .arg(&rows)
        .arg(&cols)
        .arg(&rb)
        .arg(&out);
    let grid = stride_grid(gpu, w.rows * w.cols / 8);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((grid, 1, 1), 256, 0)) }.map_err(drv("dequant launch"))?;
    Ok(())
}

/// `out[i] = f16(x[i])` for `n` values, and with `lo` (not 0) `lo[i] = f16(x[i] - out[i])`.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn to_f16(gpu: &Gpu, x: u64, out: u64, lo: u64, n: usize) -> Result<()> {
    let n_i = n as i64;
    let mut b = gpu.stream.launch_builder(&gpu.k.to_f16);
    b.arg(&x).arg(&out).arg(&lo).arg(&n_i);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((stride_grid(gpu, n), 1, 1), 256, 0)) }.map_err(drv("to_f16 launch"))?;
    Ok(())
}

/// `y[t][r] += bias[r]` for `n` rows of `rows` values.
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn add_bias_rows(
    gpu: &Gpu,
    y: u64,
    bias: u64,
    rows: usize,
    n: usize,
) -> Result<()> {
    let (rows_i, n_i) = (rows as i32, n as i64);
    let mut b = gpu.stream.launch_builder(&gpu.k.add_bias_rows);
    b.arg(&y).arg(&bias).arg(&rows_i).arg(&n_i);
    count_launch();
    // SAFETY: as above.
    unsafe { b.launch(cfg((stride_grid(gpu, rows * n), 1, 1), 256, 0)) }
        .map_err(drv("bias launch"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_args_match_the_cuda_layout() {
        assert_eq!(size_of::<MvSeg>(), 40);
        assert_eq!(std::mem::offset_of!(MvArgs, nseg), 120);
        assert_eq!(std::mem::offset_of!(MvArgs, x), 128);
        assert_eq!(std::mem::offset_of!(MvArgs, lanes), 160);
        assert_eq!(size_of::<MvArgs>(), 168);
    }

    #[test]
    fn even_lanes_leave_no_idle_threads_on_real_widths() {
        assert_eq!(even_lanes(576), 8);
        assert_eq!(even_lanes(896), 16);
        assert_eq!(even_lanes(1536), 32);
        assert_eq!(even_lanes(4864), 32);
        assert_eq!(even_lanes(8 * 7), 32);
    }
}
