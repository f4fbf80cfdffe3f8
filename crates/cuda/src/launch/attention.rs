//! Attention launches: the heads' shapes, rope and the cache store, attention (one block a
//! head, or split over several: split.rs), and both in one launch for one-token decode.

use super::{AttSplit, cfg};
use crate::device::Gpu;
use crate::error::Result;
use crate::pdl::launch_dep;
use cudarc::driver::{DeviceRepr, PushKernelArg};

/// Shapes of attention and rope.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub neox: bool,
    /// Attention scores' factor (1/sqrt(head_dim) for most families).
    pub scale: f32,
    /// Sliding-window layers: a query sees this many positions, its own included (0: all).
    pub window: usize,
    /// Scores soft-capped to `softcap * tanh(s / softcap)` (gemma2; 0: none).
    pub softcap: f32,
}

impl Heads {
    /// The rope and attention kernels' (n_head, n_head_kv, hd, hdv, n_rot, neox) arguments.
    fn kernel_args(&self) -> (i32, i32, i32, i32, i32, i32) {
        (
            self.n_head as i32,
            self.n_head_kv as i32,
            self.head_dim as i32,
            self.head_dim_v as i32,
            self.n_rot as i32,
            i32::from(self.neox),
        )
    }
}

/// Where the keys and values of a step's tokens go: token t of one sequence at position
/// `*pos + t` of one cache (`pos`: a device i32), or one token for each of several sequences
/// (`rows`: a device array of [`KvRow`], row t's caches and position, at layer `layer`).
#[derive(Clone, Copy)]
pub(crate) enum KvAt {
    /// One sequence's layer caches (`f32`: 4-byte elements, else f16), tokens from `*pos` on;
    /// a one-token step's attention splits as `split` says.
    One {
        cache: (u64, u64),
        pos: u64,
        f32: bool,
        split: AttSplit,
    },
    /// Rows of a batched step (f16 caches).
    Rows { rows: u64, layer: usize },
}

impl KvAt {
    /// The kernels' (kc, vc, pos0p, rows, layer) arguments.
    fn args(self) -> (u64, u64, u64, u64, i32) {
        match self {
            KvAt::One {
                cache: (kc, vc),
                pos,
                ..
            } => (kc, vc, pos, 0, 0),
            KvAt::Rows { rows, layer } => (0, 0, 0, rows, layer as i32),
        }
    }

    /// The split of an attention launch of `n` queries: one-token steps of one sequence only.
    fn split(&self, n: usize) -> AttSplit {
        match self {
            KvAt::One { split, .. } if n == 1 => *split,
            _ => AttSplit::NONE,
        }
    }

    /// Whether the caches hold f32 elements (the kernels' `_f32` variants).
    fn wide(&self) -> bool {
        matches!(self, KvAt::One { f32: true, .. })
    }
}

/// One sequence of a batched decode step (kernels/rope.cu `KvRow`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KvRow {
    pub k: u64,
    pub v: u64,
    /// Elements between two layers' keys (values) in the cache.
    pub k_layer: i64,
    pub v_layer: i64,
    pub pos: i32,
    pub pad: i32,
}

// SAFETY: plain old data with the kernel's layout (checked in the tests below).
unsafe impl DeviceRepr for KvRow {}

/// Rope on q (in place) and k, and the store of k and v (f16, or f32) at each token's position.
///
/// # Safety
/// See the module docs; `at` addresses caches with room for the positions written.
pub(crate) unsafe fn rope_store(
    gpu: &Gpu,
    h: &Heads,
    (q, k, v): (u64, u64, u64),
    at: KvAt,
    freqs: u64,
    n: usize,
) -> Result<()> {
    let (nh, nkv, hd, hdv, nrot, neox) = h.kernel_args();
    let f = if at.wide() {
        &gpu.k.rope_store_f32
    } else {
        &gpu.k.rope_store
    };
    let (kc, vc, pos, rows, layer) = at.args();
    let heads = (h.n_head + h.n_head_kv + 1) as u32;
    let cfg = cfg((n as u32, heads, 1), 64, 0);
    // SAFETY: as above.
    unsafe {
        launch_dep!(gpu, f, cfg, "rope launch"; &q, &k, &v, &kc, &vc, &pos, &freqs, &nh, &nkv, &hd,
            &hdv, &nrot, &neox, &rows, &layer)
    }
}

/// Causal attention of `n` queries over the cache(s): each at its position (see [`KvAt`]).
///
/// # Safety
/// See the module docs.
pub(crate) unsafe fn attention(
    gpu: &Gpu,
    h: &Heads,
    q: u64,
    at: KvAt,
    out: u64,
    n: usize,
) -> Result<()> {
    let (nh, nkv, hd, hdv) = (
        h.n_head as i32,
        h.n_head_kv as i32,
        h.head_dim as i32,
        h.head_dim_v as i32,
    );
    let (scale, window, cap) = (h.scale, h.window as i32, h.softcap);
    let f = if at.wide() {
        &gpu.k.attention_f32
    } else {
        &gpu.k.attention
    };
    let (kc, vc, pos, rows, layer) = at.args();
    let sp = at.split(n);
    let cfg = cfg((h.n_head as u32, n as u32, sp.blocks), 256, 0);
    // SAFETY: as above; a split's scratch holds n_head slots (one query).
    unsafe {
        launch_dep!(gpu, f, cfg, "attention launch"; &q, &kc, &vc, &out, &pos, &nh, &nkv, &hd, &hdv,
            &scale, &rows, &layer, &sp.part, &sp.count, &sp.max_tiles, &window, &cap)
    }
}

/// Rope, cache store and attention of one token of one sequence in one launch (kernels/
/// attention.cu `rope_attention`: the bits of [`rope_store`] then [`attention`]); f16 caches only.
/// With `prep` (not 0), it also quantizes the output into that `matvec_wide` buffer, as
/// `Prep::Plain` would (launch/fused.rs).
///
/// # Safety
/// See the module docs; `at` is `KvAt::One` with f16 caches; `prep` is 0 or holds
/// `prep_stride(n_head * head_dim_v)` bytes, with `head_dim_v` a multiple of 32.
pub(crate) unsafe fn rope_attention(
    gpu: &Gpu,
    h: &Heads,
    (q, k, v): (u64, u64, u64),
    at: KvAt,
    freqs: u64,
    out: u64,
    prep: u64,
) -> Result<()> {
    let KvAt::One {
        cache: (kc, vc),
        pos,
        f32: false,
        split: sp,
    } = at
    else {
        return Err(crate::error::CudaError::Unsupported(
            "rope_attention of a batch or an f32 cache".into(),
        ));
    };
    let (nh, nkv, hd, hdv, nrot, neox) = h.kernel_args();
    let (scale, window, cap) = (h.scale, h.window as i32, h.softcap);
    let stage = match sp.stage_max {
        0 => att_stage_cap(gpu, h),
        m => att_stage_cap(gpu, h).min(m as usize),
    };
    let smem = stage * (h.head_dim + h.head_dim_v) * 2;
    let cfg = cfg((h.n_head as u32, 1, sp.blocks), 256, smem as u32);
    let stage = stage as i32;
    // SAFETY: as above; the dynamic shared memory holds `stage` positions' keys and values.
    unsafe {
        launch_dep!(gpu, &gpu.k.rope_attention, cfg, "attention launch"; &q, &k, &v, &kc, &vc, &pos,
            &freqs, &out, &nh, &nkv, &hd, &hdv, &nrot, &neox, &scale, &prep, &sp.part, &sp.count,
            &sp.max_tiles, &stage, &window, &cap)
    }
}

/// The positions `rope_attention` stages in shared memory: as many as a tile holds and the
/// device's shared memory leaves room for, when the heads' rows are whole 16-byte units; else,
/// or with `MOLLA_ATT_STAGE=0` (for comparison; read once), 0. Measured on the H200 (session 23,
/// 8B shape at 4 layers, in process): graph-path tg128 +3%.
fn att_stage_cap(gpu: &Gpu, h: &Heads) -> usize {
    stage_cap(stage_on(), h.head_dim, h.head_dim_v, gpu.att_max_smem)
}

/// Whether rope_attention stages keys and values (unless `MOLLA_ATT_STAGE=0`; read once).
fn stage_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_ATT_STAGE").map_or(true, |v| v != "0"))
}

/// The dynamic shared memory `rope_attention` takes a block for heads of 128 key and value
/// values (Llama's and Qwen's) out of an allowance of `smem` bytes: what the device's shared
/// memory split is sized for (device.rs `carveout_percent`).
pub(crate) fn att_stage_bytes(smem: usize) -> usize {
    stage_cap(stage_on(), 128, 128, smem) * (128 + 128) * 2
}

fn stage_cap(on: bool, hd: usize, hdv: usize, smem: usize) -> usize {
    let whole = hd.is_multiple_of(8) && hdv.is_multiple_of(8) && hd > 0 && hdv > 0;
    if !on || !whole {
        return 0;
    }
    super::split::att_tile().min(smem / ((hd + hdv) * 2))
}

/// Whether one-token decode runs rope, cache store and attention as one launch (the default;
/// `MOLLA_ROPE_ATTN=0`: two launches, for comparison; read once). Measured on the H200 (session
/// 10): the 8B Q4_K_M file's tg128 358 tok/s with two launches, 374 with one.
pub(crate) fn rope_attention_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MOLLA_ROPE_ATTN").map_or(true, |v| v != "0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_positions_fit_a_tile_and_the_shared_memory() {
        let smem = 227 * 1024 - 12 * 1024;
        assert_eq!(stage_cap(false, 128, 128, smem), 0);
        assert_eq!(stage_cap(true, 128, 128, smem), 256);
        assert_eq!(stage_cap(true, 128, 128, 64 * 1024), 128);
        assert_eq!(stage_cap(true, 64, 64, smem), 256);
        assert_eq!(stage_cap(true, 68, 64, smem), 0);
        assert_eq!(stage_cap(true, 256, 256, smem), 215);
    }

    #[test]
    fn kv_row_matches_the_cuda_layout() {
        assert_eq!(std::mem::offset_of!(KvRow, pos), 32);
        assert_eq!(size_of::<KvRow>(), 40);
    }
}
