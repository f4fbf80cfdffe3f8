//! The KV cache of one sequence, held outside the model: f32 (exact) or f16 (half the memory
//! and the bandwidth attention needs on long contexts, ~2^-11 relative rounding, as llama.cpp's
//! default); flat (every position allocated up front) or paged (blocks from a shared
//! [`KvPool`], taken as the sequence grows).

use crate::error::{CpuError, Result};
use crate::paged::{BLOCK_POSITIONS, Block, KvPool};
use half::f16;
use half::slice::HalfFloatSliceExt;
use model::HParams;
use std::sync::Arc;

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CacheType {
    #[default]
    F32,
    F16,
}

impl CacheType {
    /// "f32" or "f16".
    pub fn parse(s: &str) -> Option<CacheType> {
        match s {
            "f32" => Some(CacheType::F32),
            "f16" => Some(CacheType::F16),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub(crate) enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Store {
    pub(crate) fn new(ty: CacheType, n: usize) -> Store {
        match ty {
            CacheType::F32 => Store::F32(vec![0.0; n]),
            CacheType::F16 => Store::F16(vec![f16::ZERO; n]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Store::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Store::F16(v) => v[at..at + src.len()].convert_from_f32_slice(src),
        }
    }

    fn view(&self, start: usize, end: usize) -> KvView<'_> {
        match self {
            Store::F32(v) => KvView::F32(&v[start..end]),
            Store::F16(v) => KvView::F16(&v[start..end]),
        }
    }
}

/// Keys or values of one layer, positions `0..end`, as stored.
#[derive(Clone, Copy)]
pub enum KvView<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// A paged cache's: position p in block p / BLOCK_POSITIONS.
    Paged(PagedView<'a>),
}

/// One layer's keys (`keys`) or values of a paged cache, `dim` elements a position.
#[derive(Clone, Copy)]
pub struct PagedView<'a> {
    blocks: &'a [Arc<Block>],
    layer: usize,
    dim: usize,
    keys: bool,
}

impl<'a> KvView<'a> {
    /// Elements `at..at + buf.len()` as f32: borrowed when stored as f32, else decoded into `buf`.
    pub fn row<'b>(&self, at: usize, buf: &'b mut [f32]) -> &'b [f32]
    where
        'a: 'b,
    {
        match *self {
            KvView::F32(v) => &v[at..at + buf.len()],
            KvView::F16(v) => {
                v[at..at + buf.len()].convert_to_f32_slice(buf);
                buf
            }
            KvView::Paged(p) => {
                // Callers read within one position's row (attention: one head's part).
                let (pos, off) = (at / p.dim, at % p.dim);
                debug_assert!(off + buf.len() <= p.dim);
                let b = &p.blocks[pos / BLOCK_POSITIONS];
                let store = if p.keys { &b.k } else { &b.v };
                let i = (p.layer * BLOCK_POSITIONS + pos % BLOCK_POSITIONS) * p.dim + off;
                match store {
                    Store::F32(v) => &v[i..i + buf.len()],
                    Store::F16(v) => {
                        v[i..i + buf.len()].convert_to_f32_slice(buf);
                        buf
                    }
                }
            }
        }
    }
}

enum Storage {
    /// Layer-major, `capacity` positions allocated up front.
    Flat { k: Store, v: Store },
    /// Blocks from `pool`; block i holds positions 16i .. 16i + 16. A block may be shared
    /// with other caches of the pool ([`KvCache::share_prefix`]): only whole blocks below every
    /// sharer's length are, and no cache writes below its length, so shared blocks are never
    /// written.
    Paged {
        pool: KvPool,
        blocks: Vec<Arc<Block>>,
    },
}

/// Keys and values of every layer for up to `capacity` positions.
pub struct KvCache {
    capacity: usize,
    kv_dim: usize,
    v_dim: usize,
    n_layer: usize,
    storage: Storage,
    /// Positions filled so far.
    pub len: usize,
}

impl KvCache {
    /// An f32 cache for `capacity` positions of a model with these hyper-parameters.
    pub fn new(hp: &HParams, capacity: usize) -> KvCache {
        KvCache::with_type(hp, capacity, CacheType::F32)
    }

    /// A cache of element type `ty`.
    pub fn with_type(hp: &HParams, capacity: usize, ty: CacheType) -> KvCache {
        KvCache {
            capacity,
            kv_dim: hp.kv_dim(),
            v_dim: hp.v_dim(),
            n_layer: hp.n_layer,
            storage: Storage::Flat {
                k: Store::new(ty, hp.n_layer * capacity * hp.kv_dim()),
                v: Store::new(ty, hp.n_layer * capacity * hp.v_dim()),
            },
            len: 0,
        }
    }

    /// A paged cache of up to `capacity` positions whose blocks come from `pool` as it grows
    /// (none is taken yet). A forward pass that needs a block the pool cannot give fails with
    /// [`CpuError::KvPoolFull`] and leaves the cache's contents as they were.
    pub fn paged(pool: &KvPool, capacity: usize) -> KvCache {
        let (kv_dim, v_dim, n_layer) = pool.dims();
        KvCache {
            capacity,
            kv_dim,
            v_dim,
            n_layer,
            storage: Storage::Paged {
                pool: pool.clone(),
                blocks: Vec::new(),
            },
            len: 0,
        }
    }

    /// Blocks a paged cache holds, shared ones included (0 for a flat one).
    pub fn blocks(&self) -> usize {
        match &self.storage {
            Storage::Flat { .. } => 0,
            Storage::Paged { blocks, .. } => blocks.len(),
        }
    }

    /// Keeps the first `len` positions (at most what it holds); a paged cache gives the blocks
    /// past them back to its pool. When the last kept block would be kept in part and is
    /// shared with another cache, only the whole blocks before it are kept (the next positions
    /// are written there): `len` afterwards says what was kept.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        if let Storage::Paged { pool, blocks } = &mut self.storage {
            let tail = self.len / BLOCK_POSITIONS;
            if !self.len.is_multiple_of(BLOCK_POSITIONS) && Arc::strong_count(&blocks[tail]) > 1 {
                self.len = tail * BLOCK_POSITIONS;
            }
            let keep = KvPool::blocks_for(self.len);
            if blocks.len() > keep {
                release(pool, blocks.drain(keep..));
            }
        }
    }

    /// Starts this paged cache (emptied first) with the first `n` positions of `src`, a cache
    /// of the same pool, by sharing its blocks rather than copying them: `n` must be whole
    /// blocks that `src` holds. False (and nothing changed) otherwise.
    pub fn share_prefix(&mut self, src: &KvCache, n: usize) -> bool {
        let (
            Storage::Paged { pool, .. },
            Storage::Paged {
                pool: sp,
                blocks: sb,
            },
        ) = (&self.storage, &src.storage)
        else {
            return false;
        };
        if !pool.same(sp) || !n.is_multiple_of(BLOCK_POSITIONS) || n > src.len || n > self.capacity
        {
            return false;
        }
        let shared: Vec<Arc<Block>> = sb[..n / BLOCK_POSITIONS].to_vec();
        self.clear();
        if let Storage::Paged { blocks, .. } = &mut self.storage {
            *blocks = shared;
        }
        self.len = n;
        true
    }

    /// Makes room for positions `0..end` (a paged cache takes blocks from its pool).
    pub(crate) fn grow(&mut self, end: usize) -> Result<()> {
        if let Storage::Paged { pool, blocks } = &mut self.storage {
            while blocks.len() * BLOCK_POSITIONS < end {
                match pool.take() {
                    Some(b) => blocks.push(Arc::new(b)),
                    None => {
                        return Err(CpuError::KvPoolFull {
                            total: pool.total(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (a paged cache gives its blocks back).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    pub(crate) fn fits(&self, hp: &HParams) -> bool {
        self.kv_dim == hp.kv_dim() && self.v_dim == hp.v_dim() && self.n_layer == hp.n_layer
    }

    /// Keys of `layer` for positions `0..end`, `kv_dim` per position.
    pub(crate) fn keys(&self, layer: usize, end: usize) -> KvView<'_> {
        self.view(layer, end, true)
    }

    pub(crate) fn values(&self, layer: usize, end: usize) -> KvView<'_> {
        self.view(layer, end, false)
    }

    fn view(&self, layer: usize, end: usize, keys: bool) -> KvView<'_> {
        let dim = if keys { self.kv_dim } else { self.v_dim };
        match &self.storage {
            Storage::Flat { k, v } => {
                let base = layer * self.capacity * dim;
                (if keys { k } else { v }).view(base, base + end * dim)
            }
            Storage::Paged { blocks, .. } => KvView::Paged(PagedView {
                blocks,
                layer,
                dim,
                keys,
            }),
        }
    }

    /// Stores `k` and `v` rows for consecutive positions starting at `pos` (a paged cache must
    /// have grown to hold them).
    pub(crate) fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (kd, vd, cap) = (self.kv_dim, self.v_dim, self.capacity);
        match &mut self.storage {
            Storage::Flat { k: ks, v: vs } => {
                ks.write((layer * cap + pos) * kd, k);
                vs.write((layer * cap + pos) * vd, v);
            }
            Storage::Paged { blocks, .. } => {
                for (t, (kr, vr)) in k.chunks_exact(kd).zip(v.chunks_exact(vd)).enumerate() {
                    let p = pos + t;
                    // Positions at or past `len` are never in a shared block (see Storage), so
                    // this is the block itself; a copy would only be made if that broke.
                    let b = Arc::make_mut(&mut blocks[p / BLOCK_POSITIONS]);
                    let row = layer * BLOCK_POSITIONS + p % BLOCK_POSITIONS;
                    b.k.write(row * kd, kr);
                    b.v.write(row * vd, vr);
                }
            }
        }
    }
}

impl Drop for KvCache {
    fn drop(&mut self) {
        if let Storage::Paged { pool, blocks } = &mut self.storage {
            release(pool, blocks.drain(..));
        }
    }
}

/// Drops a cache's hold on `blocks`: the ones no other cache shares go back to `pool`.
fn release(pool: &KvPool, blocks: impl Iterator<Item = Arc<Block>>) {
    pool.give(blocks.filter_map(|b| Arc::try_unwrap(b).ok()));
}
