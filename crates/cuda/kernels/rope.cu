// Rotary embedding of q (in place) and k, and the store of k and v into the f16 KV cache at
// positions pos0 + t. pos0 is read from device memory so a captured decode graph can be replayed.
// Angles are pos * freq in f64 (freqs as the CPU's Rope computes them), cos/sin rounded to f32.
// Grid (token, head): blocks y < n_head + n_head_kv rotate one q or k head, the last one copies v.

// The element indices a, b of pair i (0 .. hd/2) of a head; pairs past n_rot/2 pass through.
__device__ __forceinline__ void rope_idx(int i, int n_rot, int neox, int& a, int& b) {
    int half = n_rot >> 1;
    bool rot = i < half;
    if (neox) {
        a = rot ? i : n_rot + 2 * (i - half);
        b = rot ? i + half : a + 1;
    } else {
        a = 2 * i;
        b = a + 1;
    }
}

// cos and sin of pair i's angle at pos (f64 angle, rounded to f32).
__device__ __forceinline__ void rope_cs(int i, int pos, const double* __restrict__ freqs, float& c, float& s) {
    double th = (double)pos * freqs[i];
    c = (float)cos(th);
    s = (float)sin(th);
}

// Rounded products and sums, no FMA contraction: every call site gets the same bits.
__device__ __forceinline__ void rope_rot(float x0, float x1, float c, float s, float& y0, float& y1) {
    y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Pair i of a head: its element indices and rotated values. The one rotation every CUDA path uses.
__device__ __forceinline__ void rope_pair(const float* src, int i, int pos, const double* __restrict__ freqs, int n_rot,
                                          int neox, int& a, int& b, float& y0, float& y1) {
    rope_idx(i, n_rot, neox, a, b);
    y0 = src[a];
    y1 = src[b];
    if (i < (n_rot >> 1)) {
        float c, s;
        rope_cs(i, pos, freqs, c, s);
        rope_rot(src[a], src[b], c, s, y0, y1);
    }
}

// Row t's cache and position when a step decodes one token for each of several sequences
// (rows != null: row t's caches at layer `layer`, its position), else token t of one sequence at
// *pos0p + t in kc / vc.
struct KvRow {
    u16* k;
    u16* v;
    long long k_layer;  // elements between two layers' keys (capacity * kv_dim)
    long long v_layer;
    int pos;
    int pad;
};

// KT: the cache's element type (batched steps' caches are f16).
template <typename KT>
__device__ __forceinline__ void kv_row(const KvRow* rows, int layer, int t, KT*& kc, KT*& vc, const int* pos0p,
                                       int& pos) {
    if (rows) {
        KvRow r = rows[t];
        kc = (KT*)r.k + (size_t)layer * r.k_layer;
        vc = (KT*)r.v + (size_t)layer * r.v_layer;
        pos = r.pos;
    } else {
        pos = *pos0p + t;
    }
}

// A cache element from f32: f16 rounded to nearest, or f32 as it is.
__device__ __forceinline__ void kv_put(u16* p, float v) { *p = f2h(v); }
__device__ __forceinline__ void kv_put(float* p, float v) { *p = v; }

template <typename KT>
__device__ __forceinline__ void rope_store_body(float* q, const float* __restrict__ k, const float* __restrict__ v,
                                                KT* kc, KT* vc, const int* pos0p, const double* __restrict__ freqs,
                                                int n_head, int n_head_kv, int hd, int hdv, int n_rot, int neox,
                                                const KvRow* rows, int layer) {
    pdl_trigger();
    pdl_wait();
    int t = blockIdx.x, head = blockIdx.y;
    int pos;
    kv_row(rows, layer, t, kc, vc, pos0p, pos);
    int kv_dim = n_head_kv * hd, v_dim = n_head_kv * hdv;
    if (head == n_head + n_head_kv) {
        const float* vt = v + (size_t)t * v_dim;
        KT* vd = vc + (size_t)pos * v_dim;
        for (int j = threadIdx.x; j < v_dim; j += blockDim.x) kv_put(vd + j, vt[j]);
        return;
    }
    bool is_q = head < n_head;
    float* qt = q + (size_t)t * n_head * hd + (size_t)head * hd;
    const float* src = is_q ? qt : k + (size_t)t * kv_dim + (size_t)(head - n_head) * hd;
    KT* kd = kc + (size_t)pos * kv_dim + (size_t)(head - n_head) * hd;
    for (int i = threadIdx.x; i < (hd >> 1); i += blockDim.x) {
        int a, b;
        float y0, y1;
        rope_pair(src, i, pos, freqs, n_rot, neox, a, b, y0, y1);
        if (is_q) {
            qt[a] = y0;
            qt[b] = y1;
        } else {
            kv_put(kd + a, y0);
            kv_put(kd + b, y1);
        }
    }
}

MOLLA_KERNEL void rope_store(float* q, const float* __restrict__ k, const float* __restrict__ v, u16* kc, u16* vc,
                                      const int* pos0p, const double* __restrict__ freqs, int n_head, int n_head_kv, int hd,
                                      int hdv, int n_rot, int neox, const KvRow* rows, int layer) {
    KTRACE(9);
    rope_store_body(q, k, v, kc, vc, pos0p, freqs, n_head, n_head_kv, hd, hdv, n_rot, neox, rows, layer);
}

// The same into an f32 cache (one sequence: rows is null).
MOLLA_KERNEL void rope_store_f32(float* q, const float* __restrict__ k, const float* __restrict__ v, float* kc,
                                          float* vc, const int* pos0p, const double* __restrict__ freqs, int n_head,
                                          int n_head_kv, int hd, int hdv, int n_rot, int neox, const KvRow* rows,
                                          int layer) {
    rope_store_body(q, k, v, kc, vc, pos0p, freqs, n_head, n_head_kv, hd, hdv, n_rot, neox, rows, layer);
}
