//! Decode attention split over several blocks a head (flash-decoding, kernels/attention.cu
//! `attend_split`). Attention walks the cache in tiles of [`att_tile`] positions; one block a
//! head folds them in order. Split, block s of a head takes tiles s, s + S, ..., writes each
//! tile's maximum, sum and value sums to a scratch buffer, and the last block of the head to
//! finish folds all of them in the same order: the same bits as one block. So a cache of up to
//! one tile attends exactly as before, and a long one uses S times as many blocks.

use crate::device::Gpu;
use crate::error::Result;
use cudarc::driver::CudaSlice;

/// Positions of an attention tile (kernels/attention.cu `ATT_TILE`, passed to NVRTC by
/// compile.rs): 256, or `MOLLA_ATT_TILE` (a multiple of 32 from 32 to 1024; read once). The
/// tile is the unit of the split, so it sets how many blocks a long cache spreads over (4096
/// positions: 16 tiles); a cache of one tile attends in one block.
pub fn att_tile() -> usize {
    static TILE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| {
        std::env::var("MOLLA_ATT_TILE")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|t| t % 32 == 0 && (32..=1024).contains(t))
            .unwrap_or(256)
    })
}

/// The split a decode attention launch runs with: `blocks` blocks a head, tile partials in
/// `part` (`max_tiles * (head_dim_v + 2)` floats a head), the heads' tickets in `count`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttSplit {
    pub part: u64,
    pub count: u64,
    pub blocks: u32,
    pub max_tiles: i32,
    /// At most this many positions staged by `rope_attention` (0: as many as the device allows):
    /// `MOLLA_ATT_BUCKETS=1`'s graphs for short caches (forward.rs `att_bucket`).
    pub stage_max: u32,
}

impl AttSplit {
    /// One block a head.
    pub const NONE: AttSplit = AttSplit {
        part: 0,
        count: 0,
        blocks: 1,
        max_tiles: 0,
        stage_max: 0,
    };
}

/// The scratch of a split decode attention for one sequence's cache: allocated only when the
/// cache holds more than one tile and more than one block a head is wanted.
pub(crate) struct SplitScratch {
    part: CudaSlice<f32>,
    count: CudaSlice<u32>,
    blocks: u32,
    max_tiles: usize,
}

impl SplitScratch {
    /// Scratch for `queries` queries of `n_head` heads of `hdv` values over a cache of `capacity`
    /// positions, split over `blocks` blocks a head (at most the cache's tiles); `None` when that
    /// leaves one block.
    pub fn new(
        gpu: &Gpu,
        (queries, n_head, hdv): (usize, usize, usize),
        capacity: usize,
        blocks: usize,
    ) -> Result<Option<SplitScratch>> {
        let max_tiles = capacity.div_ceil(att_tile());
        let blocks = blocks.min(max_tiles);
        if blocks <= 1 {
            return Ok(None);
        }
        let slots = queries * n_head;
        Ok(Some(SplitScratch {
            part: gpu.zeros(slots * max_tiles * (hdv + 2))?,
            count: gpu.zeros(slots)?,
            blocks: blocks as u32,
            max_tiles,
        }))
    }

    pub fn split(&self, gpu: &Gpu) -> AttSplit {
        AttSplit {
            part: gpu.ptr(&self.part),
            count: gpu.ptr(&self.count),
            blocks: self.blocks,
            max_tiles: self.max_tiles as i32,
            stage_max: 0,
        }
    }
}

/// Blocks a head a decode attention splits over on a GPU of `sm_count` SMs: enough for about two
/// blocks an SM over all heads (`MOLLA_ATT_SPLIT=N` sets N, 1 turns the split off; read once).
pub(crate) fn split_blocks(sm_count: usize, n_head: usize) -> usize {
    static SET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let set = *SET.get_or_init(|| {
        std::env::var("MOLLA_ATT_SPLIT")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    set.unwrap_or_else(|| (2 * sm_count).div_ceil(n_head.max(1)))
        .max(1)
}
