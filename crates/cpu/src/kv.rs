//! The KV cache of one sequence, held outside the model.

use model::HParams;

/// Keys and values of every layer for up to `capacity` positions, in f32.
pub struct KvCache {
    capacity: usize,
    kv_dim: usize,
    v_dim: usize,
    n_layer: usize,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Positions filled so far.
    pub len: usize,
}

impl KvCache {
    /// A cache for `capacity` positions of a model with these hyper-parameters.
    pub fn new(hp: &HParams, capacity: usize) -> KvCache {
        KvCache {
            capacity,
            kv_dim: hp.kv_dim(),
            v_dim: hp.v_dim(),
            n_layer: hp.n_layer,
            k: vec![0.0; hp.n_layer * capacity * hp.kv_dim()],
            v: vec![0.0; hp.n_layer * capacity * hp.v_dim()],
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
    pub(crate) fn keys(&self, layer: usize, end: usize) -> &[f32] {
        let base = layer * self.capacity * self.kv_dim;
        &self.k[base..base + end * self.kv_dim]
    }

    pub(crate) fn values(&self, layer: usize, end: usize) -> &[f32] {
        let base = layer * self.capacity * self.v_dim;
        &self.v[base..base + end * self.v_dim]
    }

    /// Stores `k` and `v` rows for consecutive positions starting at `pos`.
    pub(crate) fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let kb = (layer * self.capacity + pos) * self.kv_dim;
        self.k[kb..kb + k.len()].copy_from_slice(k);
        let vb = (layer * self.capacity + pos) * self.v_dim;
        self.v[vb..vb + v.len()].copy_from_slice(v);
    }
}
