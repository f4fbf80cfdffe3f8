//! A pool of fixed-size KV blocks that paged caches ([`KvCache::paged`](crate::KvCache::paged))
//! share: a cache holds a table of blocks of [`BLOCK_POSITIONS`] positions each (every layer's
//! keys and values for those positions) and takes a block from the pool when it grows past the
//! last one, and gives its blocks back when it is cleared, truncated or dropped. Memory is
//! allocated as blocks are first needed, never beyond the pool's size, and reused afterwards:
//! a server's caches together take what their sequences hold, not `slots x context`.
//!
//! Attention reads a paged cache through [`KvView::Paged`](crate::kv::KvView): the same
//! arithmetic on the same values as a flat cache (it gathers each head's rows the way it
//! decodes an f16 cache), so logits are bit-identical either way.

use crate::kv::{CacheType, Store};
use model::HParams;
use std::sync::{Arc, Mutex};

/// Positions a block holds.
pub const BLOCK_POSITIONS: usize = 16;

/// Keys and values of every layer for [`BLOCK_POSITIONS`] positions: element
/// `(layer * BLOCK_POSITIONS + p) * dim + d`.
#[derive(Clone)]
pub(crate) struct Block {
    pub(crate) k: Store,
    pub(crate) v: Store,
}

struct Shape {
    kv_dim: usize,
    v_dim: usize,
    n_layer: usize,
    ty: CacheType,
    total: usize,
}

struct Free {
    blocks: Vec<Block>,
    /// Blocks allocated so far (held by caches or in `blocks`).
    made: usize,
}

/// A shared, bounded pool of KV blocks for one model shape. Cloning gives another handle to
/// the same pool.
#[derive(Clone)]
pub struct KvPool {
    shape: Arc<Shape>,
    free: Arc<Mutex<Free>>,
}

impl KvPool {
    /// A pool of at most `blocks` blocks of element type `ty` for a model with these
    /// hyper-parameters.
    pub fn new(hp: &HParams, ty: CacheType, blocks: usize) -> KvPool {
        KvPool {
            shape: Arc::new(Shape {
                kv_dim: hp.kv_dim(),
                v_dim: hp.v_dim(),
                n_layer: hp.n_layer,
                ty,
                total: blocks,
            }),
            free: Arc::new(Mutex::new(Free {
                blocks: Vec::new(),
                made: 0,
            })),
        }
    }

    /// Blocks the pool may hold at most.
    pub fn total(&self) -> usize {
        self.shape.total
    }

    /// Blocks held by caches now (a block shared by several counts once).
    pub fn used(&self) -> usize {
        let f = self.lock();
        f.made.saturating_sub(f.blocks.len())
    }

    /// Blocks that `positions` positions take.
    pub fn blocks_for(positions: usize) -> usize {
        positions.div_ceil(BLOCK_POSITIONS)
    }

    /// The model shape the blocks are for: kv_dim, v_dim, n_layer.
    pub(crate) fn dims(&self) -> (usize, usize, usize) {
        (self.shape.kv_dim, self.shape.v_dim, self.shape.n_layer)
    }

    /// A free block, or a new one while the pool is below its size; None when it is exhausted.
    pub(crate) fn take(&self) -> Option<Block> {
        let mut f = self.lock();
        if let Some(b) = f.blocks.pop() {
            return Some(b);
        }
        if f.made >= self.shape.total {
            return None;
        }
        f.made += 1;
        drop(f);
        let s = &self.shape;
        let per = s.n_layer * BLOCK_POSITIONS;
        Some(Block {
            k: Store::new(s.ty, per * s.kv_dim),
            v: Store::new(s.ty, per * s.v_dim),
        })
    }

    /// Whether `other` is a handle to this pool.
    pub(crate) fn same(&self, other: &KvPool) -> bool {
        Arc::ptr_eq(&self.free, &other.free)
    }

    pub(crate) fn give(&self, blocks: impl IntoIterator<Item = Block>) {
        let mut f = self.lock();
        // Never more free blocks than were made: a block copied outside the pool (which a
        // write to a shared block would do; caches never write one) is dropped instead.
        let room = f.made.saturating_sub(f.blocks.len());
        f.blocks.extend(blocks.into_iter().take(room));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        // The lists stay consistent whatever a panicking holder did: push and pop only.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}
