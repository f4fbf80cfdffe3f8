// Fused q/k/v (crate::fused; MOLLA_KDEFS=FUSEQKV, an experiment of session 44, measured 2-6%
// slower on the H100 and off: docs/cuda-persistent.md): layer l's q, k and v made by layer l - 1's
// down step, so that a layer takes three
// hand-overs instead of four. The down step's second segment is C (type PK_T_W16): its rows over
// [x_old; h], x_old the raw row the block's gate/up step kept, h the step's input, both f32 in
// shared memory; it hands the values over unscaled. The attention step after it (PK_PREP_FUSED)
// polls the residual row x with its q, k and v, works out RMSNorm's scale as the q/k/v step would
// have, and applies it and the biases. Built only with PK_FUSEQKV (the host's PkBuild::fuse).
#ifdef PK_FUSEQKV

// crate::fused::T_W16: a bit of PK_TYMASK past every ggml type.
#define PK_T_W16 63

// This lane's share of a W16 row's dot (cols / 32 f32 scales padded to 16 bytes, then cols i16,
// in shared memory) with z = [xa (xn values); xb]: groups of eight values g = lane, lane + 32, ...,
// each summed as q0 z0 then fma(q_j, z_j, .) and added times its block's scale by an fma. With the
// warp's sum, fused.rs w16_dot's bits.
__device__ __forceinline__ float pk_row_w16(const u8* row, int cols, int xn, const float* xa, const float* xb,
                                            int lane) {
    const float* sc = (const float*)row;
    const u8* q = row + ((4 * (cols >> 5) + 15) & ~15);
    float acc = 0.f;
    // Not unrolled: the kernel's code is kept small (persistent.cu, session 42).
#pragma unroll 1
    for (int g = lane; g < (cols >> 3); g += 32) {
        const int i = 8 * g;
        const int4 w = *(const int4*)(q + 2 * i);
        const float* z = i < xn ? xa + i : xb + (i - xn);
        const float4 z0 = *(const float4*)z, z1 = *(const float4*)(z + 4);
        float t = __fmul_rn((float)(short)(w.x & 0xffff), z0.x);
        t = __fmaf_rn((float)(w.x >> 16), z0.y, t);
        t = __fmaf_rn((float)(short)(w.y & 0xffff), z0.z, t);
        t = __fmaf_rn((float)(w.y >> 16), z0.w, t);
        t = __fmaf_rn((float)(short)(w.z & 0xffff), z1.x, t);
        t = __fmaf_rn((float)(w.z >> 16), z1.y, t);
        t = __fmaf_rn((float)(short)(w.w & 0xffff), z1.z, t);
        t = __fmaf_rn((float)(w.w >> 16), z1.w, t);
        acc = __fmaf_rn(sc[g >> 2], t, acc);
    }
    return acc;
}

// C's rows [ra, rb) of a chunk (row ra at base, rb0 bytes a row; the step's input has `cols`
// values in xs, x_old the step's emb_rows in xraw): a row a warp, into y as tagged words (a fused
// step hands over tagged words only: Steps::residual_fused).
__device__ __forceinline__ void pk_fused_rows(const PkStep& st, int ra, int rb, const u8* base, size_t rb0, int cols,
                                              const float* xraw, const float* xs, float* y, u32 tag) {
    const int xn = st.emb_rows, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = ra + warp; r < rb; r += PK_WARPS) {
        const float v = warp_sum(pk_row_w16(base + (size_t)(r - ra) * rb0, xn + cols, xn, xraw, xs, lane));
        if (lane == 0) st_ll((u64*)y + r, v, tag);
    }
}

// rq[0 .. n) as a q/k/v step leaves a row: times the scale (mv_scaled), plus the bias (or none).
__device__ __forceinline__ void pk_fused_scale(float* r, int n, float sc, const float* b) {
    for (int e = threadIdx.x; e < n; e += PK_THREADS) {
        float v = mv_scaled(r[e], sc);
        if (b) v += b[e];
        r[e] = v;
    }
}

// A fused attention step's poll: its head's q, k and v (segs), then the residual row x the same
// step wrote (emb_rows values) into xraw, kept for the gate/up step, in a second pass of the same
// poll (one inlined copy of it: a second one was 2.7 KB of code; its pollers take PK_ATT_POLL_U =
// 4 pairs a round in this build, so that x's 288-448 pairs are one round). Ends with a barrier;
// false when the kernel must stop.
__device__ __forceinline__ bool pk_fused_poll(const PkStep& st, const PkArgs& a, LlSeg* segs, float* xraw, int step) {
    for (int p = 0; p < (st.prep == PK_PREP_FUSED ? 2 : 1); p++) {
        if (p) segs[0] = {(const u64*)st.x, xraw, st.emb_rows};
        if (!pk_load_ll<0, PK_ATT_POLL_U>(a, segs, p ? 1 : 3, pk_tag(a, st.in_step), step)) return false;
    }
    return true;
}

// Once q, k, v and x are in: RMSNorm's scale of x (the f64 sum in a q/k/v step's order,
// pk_rms_part), then q (rq, hd values), k (rk) and v (rv, hdv) as that step would have left them,
// with the biases at offsets at[j] (the head's, the kv head's). Ends with a barrier.
__device__ __forceinline__ void pk_fused_qkv(const PkStep& st, const float* xraw, float* rq, float* rk, float* rv,
                                             const size_t* at, int hd, int hdv) {
    pk_rms_part(xraw, st.emb_rows, 0, PK_NORM_THREADS);
    __syncthreads();
    const float sc = rms_total(st.emb_rows, st.eps, PK_NORM_THREADS);
    const float *bq = st.bias[0], *bk = st.bias[1], *bv = st.bias[2];
    pk_fused_scale(rq, hd, sc, bq ? bq + at[0] : nullptr);
    pk_fused_scale(rk, hd, sc, bk ? bk + at[1] : nullptr);
    pk_fused_scale(rv, hdv, sc, bv ? bv + at[2] : nullptr);
    __syncthreads();
}

#ifdef MOLLA_X_FUSEL2
// MOLLA_KDEFS=FUSEQKV,FUSEL2 (a measurement): as a step begins, the block asks L2 for its spans of
// the next step when that is a packed fused down step (its table entry d, in the ring a step
// early), so that staging C's ~37 KB a block reads L2, not HBM, while the step waits for h.
__device__ __forceinline__ void pk_fused_l2(const PkStep& st, const PkBlk& d) {
    if (threadIdx.x != 0 || st.op != PK_OP_MATVEC || !st.packed || st.nseg != 2 || st.ty[1] != PK_T_W16) return;
    for (int k = 0; k < 3; k++) {
        const int u0 = k ? d.end[k - 1] : 0, n = d.end[k] - u0;
        if (n > 0) pk_l2_bulk(d.src[k] + 16 * (size_t)u0, 16 * n);
    }
}
#endif

#endif
