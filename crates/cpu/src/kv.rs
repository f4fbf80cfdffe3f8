//! The KV cache of one sequence, held outside the model: f32 (exact) or f16 (half the memory
//! and the bandwidth attention needs on long contexts, ~2^-11 relative rounding, as llama.cpp's
//! default).

use half::f16;
use half::slice::HalfFloatSliceExt;
use model::HParams;

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

enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Store {
    fn new(ty: CacheType, n: usize) -> Store {
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
        }
    }
}

/// Keys and values of every layer for up to `capacity` positions.
pub struct KvCache {
    capacity: usize,
    kv_dim: usize,
    v_dim: usize,
    n_layer: usize,
    k: Store,
    v: Store,
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
            k: Store::new(ty, hp.n_layer * capacity * hp.kv_dim()),
            v: Store::new(ty, hp.n_layer * capacity * hp.v_dim()),
            len: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn fits(&self, hp: &HParams) -> bool {
        self.kv_dim == hp.kv_dim() && self.v_dim == hp.v_dim() && self.n_layer == hp.n_layer
    }

    /// Keys of `layer` for positions `0..end`, `kv_dim` per position.
    pub(crate) fn keys(&self, layer: usize, end: usize) -> KvView<'_> {
        let base = layer * self.capacity * self.kv_dim;
        self.k.view(base, base + end * self.kv_dim)
    }

    pub(crate) fn values(&self, layer: usize, end: usize) -> KvView<'_> {
        let base = layer * self.capacity * self.v_dim;
        self.v.view(base, base + end * self.v_dim)
    }

    /// Stores `k` and `v` rows for consecutive positions starting at `pos`.
    pub(crate) fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        self.k.write((layer * self.capacity + pos) * self.kv_dim, k);
        self.v.write((layer * self.capacity + pos) * self.v_dim, v);
    }
}
