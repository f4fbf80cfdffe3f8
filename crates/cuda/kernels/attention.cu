// Causal grouped-query attention over the KV cache (f16, or f32 for an exact cache: the element
// type KT is u16 or float), for decode (one query), prefill (n
// queries at positions pos0 .. pos0+n) and batched decode (one query for each of n sequences,
// each with its cache and position: KvRow). One block of 8 warps per (head, query). Positions are
// walked in tiles of ATT_TILE: one thread per position computes its score into shared memory,
// the block takes the tile's max and softmax weights (running max and sum across tiles, f32),
// then the warps accumulate weighted value rows, several positions per warp at once with 16-byte
// loads when the head width allows. Head widths up to 256.

#define ATT_THREADS 256
#define ATT_WARPS 8
// Positions a tile: the host passes its choice (launch/split.rs att_tile, MOLLA_ATT_TILE), as the
// split decode's scratch is sized by it. Small tiles let a long cache split over many blocks.
#ifndef ATT_TILE
#define ATT_TILE 256
#endif

// The barrier of attend's ATT_THREADS threads (named barrier 1): in a wider block (the persistent
// kernel) only the first ATT_THREADS threads call attend.
__device__ __forceinline__ void att_sync() { asm volatile("bar.sync 1, %0;" ::"n"(ATT_THREADS) : "memory"); }

// The maximum or sum of v over attend's threads: each warp's, then the warps' in order. `red`
// (ATT_WARPS floats) must not be read by any thread from an earlier reduction that is not yet
// behind a barrier: att_tile gives its two reductions an array each, so one barrier does.
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    att_sync();
    float r = red[0];
    for (int w = 1; w < ATT_WARPS; w++) r = is_max ? fmaxf(r, red[w]) : r + red[w];
    return r;
}

// A cache element as f32, and 8 consecutive f32 elements (32-byte aligned) from two 16-byte
// loads. The f16 cache keeps its own loops below (one 16-byte load of 8 halves), whose code the
// persistent kernel inlines unchanged.
__device__ __forceinline__ float kv_f(u16 v) { return h2f(v); }
__device__ __forceinline__ float kv_f(float v) { return v; }
__device__ __forceinline__ void kv_ld8(const float* p, float* e) {
    float4 a = ((const float4*)p)[0], b = ((const float4*)p)[1];
    e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w, e[4] = b.x, e[5] = b.y, e[6] = b.z, e[7] = b.w;
}

// Elements 0..8 of a key row's 16-byte f16 unit u, as f32.
__device__ __forceinline__ void key_unit_of(uint4 u, float* e) {
    u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        e[2 * j] = h2f((u16)(w[j] & 0xffff));
        e[2 * j + 1] = h2f((u16)(w[j] >> 16));
    }
}

// Elements 0..8 of a key row's 16-byte (f16) or 32-byte (f32) unit at r, as f32.
__device__ __forceinline__ void key_unit(const u16* r, float* e) { key_unit_of(*(const uint4*)r, e); }
__device__ __forceinline__ void key_unit(const float* r, float* e) { kv_ld8(r, e); }

// s plus q[0..8) (shared) against a key unit's 8 elements e, in key_dot's order (key_dot_swz;
// key_dot spells the same sum out, and its code is left as measured).
__device__ __forceinline__ float key_dot8(const float* q, const float* e, float s) {
#pragma unroll
    for (int j = 0; j < 4; j++) s += q[2 * j] * e[2 * j] + q[2 * j + 1] * e[2 * j + 1];
    return s;
}

// Dot of q (shared, f32) with a key row of hd values.
__device__ __forceinline__ float key_dot(const float* qs, const u16* kr, int hd) {
    float s = 0.f;
#if !defined(MOLLA_PK_ONLY) || defined(MOLLA_X_KEYU8)
    // The row's 16-byte units loaded eight at a time before they are summed. Without it (hd
    // known only at run time in the main program) the loop below loads two units a trip, each
    // trip waiting for the sums of the one before: eight round trips a 128-wide key row in the
    // unstaged tiles of long caches. key_dot_swz's products in its order: the same bits.
    // Session 53 (was MOLLA_KDEFS=KEYU8), H100: SmolLM2 Q4_1 tg128 at d4096 802.9, 802.9 tok/s
    // against 792.3, 789.0. The main program's only: the persistent kernel (hd known when built
    // for the model's shape) keeps the loop below unless MOLLA_KDEFS=KEYU8 (not measured there).
    if ((hd & 7) == 0) {
        for (int d0 = 0; d0 < hd; d0 += 64) {
            uint4 u[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (d0 + 8 * k < hd) u[k] = *(const uint4*)(kr + d0 + 8 * k);
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (d0 + 8 * k < hd) {
                    float e[8];
                    key_unit_of(u[k], e);
                    s = key_dot8(qs + d0 + 8 * k, e, s);
                }
        }
        return s;
    }
#endif
    if ((hd & 7) == 0) {
        for (int d = 0; d < hd; d += 8) {
            uint4 u = *(const uint4*)(kr + d);
            u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                s += qs[d + 2 * j] * h2f((u16)(w[j] & 0xffff)) + qs[d + 2 * j + 1] * h2f((u16)(w[j] >> 16));
        }
    } else {
        for (int d = 0; d < hd; d++) s += qs[d] * h2f(kr[d]);
    }
    return s;
}

// Where element i of staged key row `row` lies in the swizzled layout key_dot_swz reads (unit
// i >> 3 at slot (i >> 3) ^ (row & 7)), for the writers of a staged row.
__device__ __forceinline__ int key_swz_at(int i, int row) { return 8 * ((i >> 3) ^ (row & 7)) + (i & 7); }

// key_dot of a key row staged in shared memory swizzled (SWZ, the persistent kernel's staged
// keys when hd is a multiple of 64): the row's 16-byte unit j at slot j ^ (row & 7),
// so the lanes of a warp, one row each, read different banks. The same products in the same
// order as key_dot.
__device__ __forceinline__ float key_dot_swz(const float* qs, const u16* kr, int hd, int row) {
    float s = 0.f;
    for (int d = 0; d < hd; d += 8) {
        float e[8];
        key_unit(kr + 8 * ((d >> 3) ^ (row & 7)), e);
        s = key_dot8(qs + d, e, s);
    }
    return s;
}

__device__ __forceinline__ float key_dot(const float* qs, const float* kr, int hd) {
    float s = 0.f;
    if ((hd & 7) == 0) {
        for (int d = 0; d < hd; d += 8) {
            float e[8];
            kv_ld8(kr + d, e);
#pragma unroll
            for (int j = 0; j < 4; j++) s += qs[d + 2 * j] * e[2 * j] + qs[d + 2 * j + 1] * e[2 * j + 1];
        }
    } else {
        for (int d = 0; d < hd; d++) s += qs[d] * kr[d];
    }
    return s;
}

// acc[0..8) += p * the 8 cache elements at r (16-byte aligned f16, 32-byte aligned f32).
__device__ __forceinline__ void acc8(float p, const u16* r, float* acc) {
    uint4 u = *(const uint4*)r;
    u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        acc[2 * j] += p * h2f((u16)(w[j] & 0xffff));
        acc[2 * j + 1] += p * h2f((u16)(w[j] >> 16));
    }
}

__device__ __forceinline__ void acc8(float p, const float* r, float* acc) {
    float e[8];
    kv_ld8(r, e);
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] += p * e[j];
}

// Weighted sum of value rows, LP lanes per position (8 dims each, 16- or 32-byte loads): each
// lane adds into acc[0..8] for dims 8 * (lane % LP) ..; positions i = warp * PPW + lane / LP + k * stride.
template <int LP, typename KT>
__device__ __forceinline__ void values_vec(const float* ps, const KT* vbase, int v_dim, int np, float* acc) {
    const int PPW = 32 / LP;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int dim0 = 8 * (lane % LP);
#pragma unroll 4
    for (int i = warp * PPW + lane / LP; i < np; i += ATT_WARPS * PPW) acc8(ps[i], vbase + (size_t)i * v_dim + dim0, acc);
}

// One tile of a query head's attention: positions p0 .. p0+np-1 (np <= ATT_TILE) of kv head
// `kvh`, `qs` (shared, hd floats, ready) against the cached keys and values. Gives every thread
// the tile's maximum score `tm` and its sum of exp(score - tm) `tl`, and thread d < hdv the
// tile's weighted sum of value dim d `tv` (0 for the others). The block's first ATT_THREADS
// threads must all call it (and no others).
// HD, HDV: when not 0, hd and hdv known at compile time (the persistent kernel built for one
// model's head shape), so that its loops have known trip counts and the layout tests fold.
// Kept a call: its code once for every tile loop that calls it (inlining it in the persistent
// kernel, PKATTINL, measured no faster: session 17).
// MK (the graph path's kernels): each score soft-capped to cap * tanh(s / cap) when cap is not 0
// (gemma2), and positions before `lo` masked out (sliding-window layers); a tile with every
// position masked gives tm = -inf, tl = tv = 0, which att_fold<true> skips. With lo = 0 and
// cap = 0, the arithmetic of MK = false (so the same bits as the persistent kernel's).
template <typename KT, bool SWZ = false, int HD = 0, int HDV = 0, bool MK = false>
__device__ __noinline__ void att_tile(const float* qs, const KT* __restrict__ kc, const KT* __restrict__ vc, int p0, int np, int kvh,
                         int kv_dim, int v_dim, int hd, int hdv, float scale, float& tm, float& tl, float& tv,
                         int lo = 0, float cap = 0.f) {
    if (HD) hd = HD;
    if (HDV) hdv = HDV;
    __shared__ float ps[ATT_TILE];
    // The maximum's and the sum's warp partials (apart, so that neither reduction waits for the
    // other's readers; the tile's last barrier orders them against the next tile's).
    __shared__ float red_m[ATT_WARPS], red_s[ATT_WARPS];
    __shared__ float sacc[ATT_WARPS][256];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // Value layout: LP lanes per position when hdv is 64, 128 or 256; else one lane per dim.
    int lp = hdv == 64 ? 8 : hdv == 128 ? 16 : hdv == 256 ? 32 : 0;
    float tmax = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < np; i += ATT_THREADS) {
        const KT* kr = kc + (size_t)(p0 + i) * kv_dim + (size_t)kvh * hd;
        float s;
        if constexpr (SWZ) s = key_dot_swz(qs, kr, hd, p0 + i) * scale;
        else s = key_dot(qs, kr, hd) * scale;
        if constexpr (MK) {
            if (cap != 0.f) s = cap * tanhf(s / cap);
            if (p0 + i < lo) s = -__int_as_float(0x7f800000);
        }
        ps[i] = s;
        tmax = fmaxf(tmax, s);
    }
    tmax = block_reduce(tmax, true, red_m);
    float tsum = 0.f;
    for (int i = threadIdx.x; i < np; i += ATT_THREADS) {
        float e = MK && tmax == -__int_as_float(0x7f800000) ? 0.f : expf(ps[i] - tmax);
        ps[i] = e;
        tsum += e;
    }
    tsum = block_reduce(tsum, false, red_s);  // its barrier also publishes ps
    float acc[8];
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = 0.f;
    const KT* vbase = vc + (size_t)p0 * v_dim + (size_t)kvh * hdv;
    if (lp == 8) values_vec<8>(ps, vbase, v_dim, np, acc);
    else if (lp == 16) values_vec<16>(ps, vbase, v_dim, np, acc);
    else if (lp == 32) values_vec<32>(ps, vbase, v_dim, np, acc);
    else {
        for (int i = warp; i < np; i += ATT_WARPS) {
            float p = ps[i];
            const KT* vr = vbase + (size_t)i * v_dim;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int d = lane + 32 * j;
                if (d < hdv) acc[j] += p * kv_f(vr[d]);
            }
        }
    }
    // Merge: lanes of a warp that hold the same dims (vector layout), then the warps.
    if (lp) {
        for (int off = lp; off < 32; off <<= 1)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
        if (lane < lp)
#pragma unroll
            for (int j = 0; j < 8; j++) sacc[warp][8 * lane + j] = acc[j];
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int d = lane + 32 * j;
            if (d < hdv) sacc[warp][d] = acc[j];
        }
    }
    att_sync();
    float v = 0.f;
    if ((int)threadIdx.x < hdv)
        for (int w = 0; w < ATT_WARPS; w++) v += sacc[w][threadIdx.x];
    att_sync();  // ps, red_m, red_s and sacc are reused by the next tile
    tm = tmax;
    tl = tsum;
    tv = v;
}

// Folds a tile's (tm, tl, tv) into the running (m, l, o) of the tiles before it, in tile order:
// both rescaled to the larger maximum. From m = -inf, l = o = 0, one tile gives exactly (tm, tl,
// tv), so o / l is the single tile's tv / tl. The operations are spelt out (no contraction
// choice is left to the compiler), so every kernel that folds the same tiles in the same order
// gets the same bits: attend in one block, attend_split's merge after several.
// MK: a tile with every position masked (tm = -inf) leaves them as they are.
template <bool MK = false>
__device__ __forceinline__ void att_fold(float& m, float& l, float& o, float tm, float tl, float tv) {
    if (MK && tm == -__int_as_float(0x7f800000)) return;
    float mn = fmaxf(m, tm);
    float a = expf(m - mn), b = expf(tm - mn);
    l = __fmaf_rn(l, a, __fmul_rn(tl, b));
    o = __fmaf_rn(o, a, __fmul_rn(tv, b));
    m = mn;
}

// One query head's attention over cache positions 0 .. end-1 of kv head `kvh`: `qs` (shared,
// hd floats, ready) against the cached keys and values, tile by tile (att_tile, att_fold);
// writes hdv values to `o`. The block's first ATT_THREADS threads must all call it (and no
// others). ONE: the caller guarantees end <= ATT_TILE, so only the single tile's path is built
// (the persistent kernel built for short caches, PK_SHORT).
// MK: as att_tile's (positions before `lo` masked, scores capped by `cap`); the tiles wholly
// before lo are skipped.
template <typename KT, bool SWZ = false, int HD = 0, int HDV = 0, bool ONE = false, bool MK = false>
__device__ void attend(const float* qs, const KT* __restrict__ kc, const KT* __restrict__ vc, int end, int kvh,
                       int kv_dim, int v_dim, int hd, int hdv, float scale, float* o, int lo = 0, float cap = 0.f) {
    if (HDV) hdv = HDV;
    float m = -__int_as_float(0x7f800000), l = 0.f, acc = 0.f;
    const int first = MK ? lo / ATT_TILE * ATT_TILE : 0;
    att_sync();
    if (MK && first > 0 && end - first <= ATT_TILE) {
        att_tile<KT, SWZ, HD, HDV, MK>(qs, kc, vc, first, end - first, kvh, kv_dim, v_dim, hd, hdv, scale, m, l, acc,
                                       lo, cap);
    } else if (ONE || end <= ATT_TILE) {
        // One tile: att_fold from (-inf, 0, 0) would give back (tm, tl, tv), but for a -0 sum of
        // values, which it makes +0 (and o = +0 / l); so the fold is skipped (decode at short
        // contexts, every path alike).
        att_tile<KT, SWZ, HD, HDV, MK>(qs, kc, vc, 0, end, kvh, kv_dim, v_dim, hd, hdv, scale, m, l, acc, lo, cap);
    } else {
        for (int p0 = first; p0 < end; p0 += ATT_TILE) {
            float tm, tl, tv;
            att_tile<KT, SWZ, HD, HDV, MK>(qs, kc, vc, p0, min(ATT_TILE, end - p0), kvh, kv_dim, v_dim, hd, hdv, scale,
                                           tm, tl, tv, lo, cap);
            att_fold<MK>(m, l, acc, tm, tl, tv);
        }
    }
    if ((int)threadIdx.x < hdv) o[threadIdx.x] = acc / l;
    att_sync();  // the caller may reuse o's memory
}

// Tile partials a split attention's last block loads at once before folding them.
#define ATT_FOLD_BATCH 8

// Tiles of the cache a query at `end` positions attends over.
__device__ __forceinline__ int att_tiles(int end) { return (end + ATT_TILE - 1) / ATT_TILE; }

// The block of a split attention grid (gridDim.z blocks a query head, block blockIdx.z) that
// holds the tile of position end - 1 (the one a decode step stores), or -1 when the head does not
// split: then block 0 attends alone.
__device__ __forceinline__ int att_last_owner(int end) {
    int nt = att_tiles(end);
    return gridDim.z == 1 || nt == 1 ? 0 : (nt - 1) % gridDim.z;
}

// Whether block blockIdx.z of a split attention grid has work at `end` positions.
__device__ __forceinline__ bool att_has_work(int end) {
    int nt = att_tiles(end);
    return gridDim.z == 1 || nt == 1 ? blockIdx.z == 0 : (int)blockIdx.z < nt;
}

// attend split over the gridDim.z blocks of query head `slot` (flash-decoding): block s takes
// tiles s, s + S, ... and writes each tile's (tm, tl, tv) to `part` (max_tiles * (hdv + 2) floats
// a slot); the last of the head's blocks to finish (a ticket in count[slot], reset by it) folds
// every tile in order, as attend does in one block, so the same bits, and writes `o`. Returns
// whether this block wrote o. Blocks without work (att_has_work) must not call it. With one
// block or one tile, it is attend.
// `lo` and `cap` as attend's (masking: the graph path's kernels); a tile wholly before lo is
// not computed, its partial the masked tile's (-inf, 0, 0).
template <typename KT>
__device__ bool attend_split(const float* qs, const KT* __restrict__ kc, const KT* __restrict__ vc, int end, int kvh,
                             int kv_dim, int v_dim, int hd, int hdv, float scale, float* o, float* part, u32* count,
                             int slot, int max_tiles, int lo, float cap) {
    int S = gridDim.z, nt = att_tiles(end);
    if (S == 1 || nt == 1) {
        attend<KT, false, 0, 0, false, true>(qs, kc, vc, end, kvh, kv_dim, v_dim, hd, hdv, scale, o, lo, cap);
        return true;
    }
    float* pb = part + (size_t)slot * max_tiles * (hdv + 2);
    att_sync();
    for (int j = blockIdx.z; j < nt; j += S) {
        float tm, tl, tv;
        int p0 = j * ATT_TILE;
        if (p0 + ATT_TILE <= lo) tm = -__int_as_float(0x7f800000), tl = 0.f, tv = 0.f;
        else
            att_tile<KT, false, 0, 0, true>(qs, kc, vc, p0, min(ATT_TILE, end - p0), kvh, kv_dim, v_dim, hd, hdv, scale,
                                            tm, tl, tv, lo, cap);
        float* pj = pb + (size_t)j * (hdv + 2);
        if (threadIdx.x == 0) pj[0] = tm, pj[1] = tl;
        if ((int)threadIdx.x < hdv) pj[2 + threadIdx.x] = tv;
    }
    __shared__ int last;
    __threadfence();
    att_sync();
    if (threadIdx.x == 0) {
        int blocks = min(S, nt);
        last = atomicAdd(count + slot, 1u) == (u32)(blocks - 1);
        if (last) count[slot] = 0;  // every other block of the head has taken its ticket
    }
    att_sync();
    if (!last) return false;
    __threadfence();
    // The partials ATT_FOLD_BATCH tiles at a time into registers (their loads in flight together),
    // then folded in tile order.
    float m = -__int_as_float(0x7f800000), l = 0.f, acc = 0.f;
    for (int j0 = 0; j0 < nt; j0 += ATT_FOLD_BATCH) {
        float tm[ATT_FOLD_BATCH], tl[ATT_FOLD_BATCH], tv[ATT_FOLD_BATCH];
#pragma unroll
        for (int u = 0; u < ATT_FOLD_BATCH; u++) {
            const float* pj = pb + (size_t)min(j0 + u, nt - 1) * (hdv + 2);
            tm[u] = __ldcg(pj);
            tl[u] = __ldcg(pj + 1);
            tv[u] = (int)threadIdx.x < hdv ? __ldcg(pj + 2 + threadIdx.x) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < ATT_FOLD_BATCH; u++)
            if (j0 + u < nt) att_fold<true>(m, l, acc, tm[u], tl[u], tv[u]);
    }
    if ((int)threadIdx.x < hdv) o[threadIdx.x] = acc / l;
    att_sync();
    return true;
}

// The first position a query at `end` - 1 sees: end - window (sliding-window layers), else 0.
__device__ __forceinline__ int att_lo(int end, int window) { return window > 0 ? max(0, end - window) : 0; }

// Grid (n_head, n queries, S): block (h, t, s). With S > 1, each query's positions split over S
// blocks (attend_split; `part` and `count` hold n * n_head slots); S = 1 is attend. `window`
// (0: none) and `cap` (0: none) as attend's masking takes them.
template <typename KT>
__device__ __forceinline__ void attention_body(const float* __restrict__ q, KT* kc, KT* vc, float* __restrict__ out,
                                               const int* pos0p, int n_head, int n_head_kv, int hd, int hdv, float scale,
                                               const KvRow* rows, int layer, float* part, u32* count, int max_tiles,
                                               int window, float cap) {
    pdl_trigger();
    pdl_wait();
    __shared__ float qs[256];
    int h = blockIdx.x, t = blockIdx.y;
    int kvh = h / (n_head / n_head_kv);
    int pos;
    kv_row(rows, layer, t, kc, vc, pos0p, pos);
    int end = pos + 1;
    if (!att_has_work(end)) return;
    const float* qh = q + (size_t)t * n_head * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) qs[d] = qh[d];
    __syncthreads();
    attend_split(qs, (const KT*)kc, (const KT*)vc, end, kvh, n_head_kv * hd, n_head_kv * hdv, hd, hdv, scale,
                 out + (size_t)t * n_head * hdv + (size_t)h * hdv, part, count, t * n_head + h, max_tiles,
                 att_lo(end, window), cap);
}

MOLLA_KERNEL void __launch_bounds__(ATT_THREADS) attention(const float* __restrict__ q, const u16* __restrict__ kc,
                                                                    const u16* __restrict__ vc, float* __restrict__ out,
                                                                    const int* pos0p, int n_head, int n_head_kv, int hd,
                                                                    int hdv, float scale, const KvRow* rows, int layer,
                                                                    float* part, u32* count, int max_tiles, int window,
                                                                    float cap) {
    KTRACE(8);
    attention_body(q, (u16*)kc, (u16*)vc, out, pos0p, n_head, n_head_kv, hd, hdv, scale, rows, layer, part, count,
                   max_tiles, window, cap);
}

// The same over an f32 cache (one sequence: rows is null).
MOLLA_KERNEL void __launch_bounds__(ATT_THREADS) attention_f32(const float* __restrict__ q, const float* __restrict__ kc,
                                                                        const float* __restrict__ vc, float* __restrict__ out,
                                                                        const int* pos0p, int n_head, int n_head_kv, int hd,
                                                                        int hdv, float scale, const KvRow* rows, int layer,
                                                                        float* part, u32* count, int max_tiles, int window,
                                                                        float cap) {
    attention_body(q, (float*)kc, (float*)vc, out, pos0p, n_head, n_head_kv, hd, hdv, scale, rows, layer, part, count,
                   max_tiles, window, cap);
}

// Decode attention with the rope and cache store of rope_store folded in (one launch instead of
// two; one sequence, f16 cache, one token at *pos0p): grid (n_head, 1, S), as attention's. The
// block of head h that holds the last tile (att_last_owner) rotates its kv head's k and stores k
// and v at the position (every such block of a kv group stores the same bytes), every block with
// work rotates q, and they attend over positions 0 ..= pos (attend_split), the owner reading its
// own stores back. The arithmetic, conversions and order of rope_store then attention, so the
// same bits (as the persistent kernel's attention step, which does the same). q is left
// unrotated (only attention reads it). With `prep` (not null; hdv a multiple of 32), the block
// that writes head h's output also quantizes it into the q16 row at prep + 4 * n_head * hdv, as
// matvec_prep_wide would for the next matvec (the same bits: q16_block on the same values), so
// that matvec_wide reads it without a preparation launch.
// Staged attention (stage_cap > 0, at most a tile, with as much dynamic shared memory as
// stage_cap positions' keys and values take; launch/attention.rs `att_stage_cap`, 0 with
// MOLLA_ATT_STAGE=0): a block whose cache holds fewer than stage_cap positions copies its kv
// head's keys and values into shared memory with cp.async as it starts (keys swizzled when hd is
// a multiple of 64), so that their loads overlap those of q, k and v and the rope, adds this
// position's k and v to the copy as it stores them, and attends on the copy: the persistent
// kernel's staged attention, the same arithmetic, so the same bits (+3% tg128 on the 8B shape,
// docs/cuda-persistent.md session 23).
MOLLA_KERNEL void __launch_bounds__(ATT_THREADS) rope_attention(const float* __restrict__ q, const float* __restrict__ k,
                                                                         const float* __restrict__ v, u16* kc, u16* vc,
                                                                         const int* pos0p, const double* __restrict__ freqs,
                                                                         float* __restrict__ out, int n_head, int n_head_kv,
                                                                         int hd, int hdv, int n_rot, int neox, float scale,
                                                                         u8* prep, float* part, u32* count, int max_tiles,
                                                                         int stage_cap, int window, float cap) {
    KTRACE(7);
    pdl_trigger();
    pdl_wait();
    __shared__ float rq[256], rk[256], qs[256];
    // The loads that do not depend on the position (this thread's q, k and v values and its
    // pair's frequency; hd, hdv <= ATT_THREADS) are issued with the position's, so their round
    // trips overlap it, and the pair's cos and sin are worked out before the first barrier (into
    // rcs), so that the f64 cos and sin overlap the loads instead of following the barrier
    // (session 27: l8 Q4_K at 4 layers, graph path, +2.5-3.7%; was MOLLA_KDEFS=ATTEARLY). The
    // same values and arithmetic as rope_store: the same bits.
    __shared__ float rcs[256];  // n_rot <= hd <= 256
    const int h = blockIdx.x, kvh = h / (n_head / n_head_kv), t = threadIdx.x;
    const float qv = t < hd ? q[(size_t)h * hd + t] : 0.f;
    const float kv0 = t < hd ? k[(size_t)kvh * hd + t] : 0.f;
    const float vv = t < hdv ? v[(size_t)kvh * hdv + t] : 0.f;
    const double fr = t < (n_rot >> 1) ? freqs[t] : 0.0;
    const int pos = *pos0p;
    if (!att_has_work(pos + 1)) return;
    const bool store = (int)blockIdx.z == att_last_owner(pos + 1);
    int kv_dim = n_head_kv * hd, v_dim = n_head_kv * hdv;
    // One tile (stage_cap <= ATT_TILE), so a staged block attends alone and stores.
    extern __shared__ float4 att_stage4[];
    u16* ks = (u16*)att_stage4;
    u16* vs = ks + (size_t)stage_cap * hd;
    const bool staged = pos < stage_cap, swz = (hd & 63) == 0;
    if (staged) {
        stage_rows16(smem_u32(ks), kc + (size_t)kvh * hd, kv_dim, hd >> 3, pos, swz, ATT_THREADS);
        stage_rows16(smem_u32(vs), vc + (size_t)kvh * hdv, v_dim, hdv >> 3, pos, false, ATT_THREADS);
        cp_commit();
    }
    if (t < hd) rq[t] = qv, rk[t] = kv0;
    u16* vd = vc + (size_t)pos * v_dim + (size_t)kvh * hdv;
    if (store && t < hdv) {
        u16 h16 = f2h(vv);
        vd[t] = h16;
        if (staged) vs[(size_t)pos * hdv + t] = h16;
    }
    if (t < (n_rot >> 1)) {
        // rope_cs's expression on the frequency loaded above.
        double th = (double)pos * fr;
        rcs[2 * t] = (float)cos(th);
        rcs[2 * t + 1] = (float)sin(th);
    }
    __syncthreads();
    u16* kd = kc + (size_t)pos * kv_dim + (size_t)kvh * hd;
    for (int i = threadIdx.x; i < (hd >> 1); i += ATT_THREADS) {
        int a, b;
        rope_idx(i, n_rot, neox, a, b);
        float q0 = rq[a], q1 = rq[b], k0 = rk[a], k1 = rk[b];
        if (i < (n_rot >> 1)) {
            float c, s;
            c = rcs[2 * i], s = rcs[2 * i + 1];
            rope_rot(rq[a], rq[b], c, s, q0, q1);
            rope_rot(rk[a], rk[b], c, s, k0, k1);
        }
        qs[a] = q0;
        qs[b] = q1;
        if (store) {
            u16 h0 = f2h(k0), h1 = f2h(k1);
            kd[a] = h0;
            kd[b] = h1;
            if (staged) {
                // Row pos of the copy, in the layout stage_rows16 gave the others.
                u16* kr = ks + (size_t)pos * hd;
                kr[swz ? key_swz_at(a, pos) : a] = h0;
                kr[swz ? key_swz_at(b, pos) : b] = h1;
            }
        }
    }
    if (staged) cp_wait<0>();
    __syncthreads();
    bool wrote;
    if (staged) {
        float* o = out + (size_t)h * hdv;
        const int lo = att_lo(pos + 1, window);
        if (swz) attend<u16, true, 0, 0, false, true>(qs, ks, vs, pos + 1, 0, hd, hdv, hd, hdv, scale, o, lo, cap);
        else attend<u16, false, 0, 0, false, true>(qs, ks, vs, pos + 1, 0, hd, hdv, hd, hdv, scale, o, lo, cap);
        wrote = true;
    } else
        wrote = attend_split(qs, (const u16*)kc, (const u16*)vc, pos + 1, kvh, kv_dim, v_dim, hd, hdv, scale,
                             out + (size_t)h * hdv, part, count, h, max_tiles, att_lo(pos + 1, window), cap);
    if (prep && wrote) {
        __syncthreads();  // the head's output is in `out`
        if (threadIdx.x < 32) {
            // Four lanes a block of 32 values; lanes past the head's blocks compute on its first
            // and store nothing (q16_block's shuffles need the whole warp).
            int lane = threadIdx.x, quarter = lane & 3, nb = hdv >> 5, bl = lane >> 2;
            bool live = bl < nb;
            const float* src = out + (size_t)h * hdv + 32 * (live ? bl : 0) + 8 * quarter;
            float vals[8];
#pragma unroll
            for (int i = 0; i < 8; i++) vals[i] = __ldcg(src + i);
            int cols = n_head * hdv;
            q16_block(vals, h * nb + bl, quarter, live, cols, prep + (size_t)cols * 4);
        }
    }
}
