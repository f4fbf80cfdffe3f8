// Batched decode (one token of each of several sequences, continuous batching): each input row
// prepared once (matvec_prep), then every weight row read once for up to MV_MULTI inputs
// (matvec_multi, matvec_multi_fx), each output with the bits `matvec` gives that input alone.
// Compiled right after matvec.cu, whose input preparation and row walks it uses.

// Inputs a batched matvec block prepares at most (one token of each of several sequences).
#define MV_MULTI 8

// One row's dot products with ng <= MV_MULTI prepared inputs (xs[g], xq[g]), each with the bits
// row_dot_ty gives it alone.
__device__ __forceinline__ void row_dot_multi(int ty, const u8* __restrict__ w, float* const* xs, const Xq* xq, int ng,
                                              int cols, int lane, int lanes, float* acc) {
#define MULTI_Q16(T) row_dot_q16_multi<T, MV_MULTI>(w, xq, ng, cols, lane, lanes, acc)
    Q16_DISPATCH(ty, MULTI_Q16)
#undef MULTI_Q16
#pragma unroll
    for (int g = 0; g < MV_MULTI; g++) acc[g] = g < ng ? row_dot_ty(ty, w, xs[g], xq[g], cols, lane, lanes) : 0.f;
}

// row_dot_multi's fixed-point rows on the f32 inputs (the legacy q16 formats; NaN rows,
// FxAcc::bad, for any other).
__device__ __forceinline__ void row_dot_multi(int ty, const u8* __restrict__ w, float* const* xs, const Xq* xq, int ng,
                                              int cols, int lane, int lanes, FxAcc* acc) {
    (void)xq;
#define MULTI_FX(T) row_dot_f32_fx_multi<T, MV_MULTI>(w, xs, ng, cols, lane, lanes, acc)
    switch (ty) {
        Q16_LEGACY_CASES(MULTI_FX)
        default: break;
    }
#undef MULTI_FX
#pragma unroll
    for (int g = 0; g < MV_MULTI; g++) acc[g] = FxAcc{0, 1};
}

// A row's output of input t: f32 (mv_store, times the input's RMSNorm scale) or fixed point
// (mv_store_fx; such rows never have an RMSNorm input).
__device__ __forceinline__ void mv_out(const MvSeg& s, int t, int r, float v, float scale) {
    mv_store(s, t, r, mv_scaled(v, scale));
}
__device__ __forceinline__ void mv_out(const MvSeg& s, int t, int r, FxAcc v, float) { mv_store_fx(s, t, r, v); }

// Row r of segment si (when active) against inputs t0 .. t0 + ng, summed in A (float, or FxAcc
// for fixed-point rows), then stored.
template <class A>
__device__ __forceinline__ void mv_multi_row(const MvArgs& a, int si, int r, bool active, float* const* xs,
                                             const Xq* xq, const float* scale, int ng, int t0, int lane, int lanes) {
    A acc[MV_MULTI];
    if (active) {
        const MvSeg& s = a.seg[si];
        row_dot_multi(s.ty, s.w + (size_t)r * s.row_bytes, xs, xq, ng, a.cols, lane, lanes, acc);
    } else {
#pragma unroll
        for (int g = 0; g < MV_MULTI; g++) acc[g] = A{};
    }
    __syncwarp();
#pragma unroll
    for (int g = 0; g < MV_MULTI; g++) acc[g] = group_sum(acc[g], lanes);
    if (active && lane == 0) {
#pragma unroll
        for (int g = 0; g < MV_MULTI; g++)
            if (g < ng) mv_out(a.seg[si], t0 + g, r, acc[g], scale[g]);
    }
}

// Batched decode, first pass: input row blockIdx.x of the batch prepared exactly as `matvec`
// prepares it (the block is as wide, so RMSNorm sums in the same order), then stored at
// prep + blockIdx.x * stride bytes: the f32 row, then its q16 quantization.
MOLLA_KERNEL void matvec_prep(const MvArgs a, u8* prep, int stride) {
    extern __shared__ float4 smem4[];
    float* xs = (float*)smem4;
    // Fixed-point rows (matvec_multi_fx) read the f32 row: its quantization is left out.
    if (mv_fx(a)) load_input<false>(a, xs, blockIdx.x);
    else load_input<true>(a, xs, blockIdx.x);
    const int4* src = (const int4*)smem4;
    u8* row = prep + (size_t)blockIdx.x * stride;
    for (int i = threadIdx.x; i < (prep_scale_off(a.cols) >> 4); i += blockDim.x) ((int4*)row)[i] = src[i];
    if (threadIdx.x == 0) *(float*)(row + prep_scale_off(a.cols)) = mv_scale;
}

// Batched decode, second pass: input rows t0 .. t0 + ng of n (prepared by matvec_prep; t0 =
// blockIdx.y * per_block, ng <= per_block <= MV_MULTI) against the rows' share blockIdx.x of
// gridDim.x: the block copies its inputs into shared memory and reads each weight row once for
// all of them. Output row r of input t goes to y + t * rows of its segment, with the bits
// `matvec` gives it for that input alone.
// FX: fixed-point rows (MvSeg::accumulate 2), a kernel of their own (matvec_multi_fx), as for
// matvec.
template <bool FX>
__device__ __forceinline__ void matvec_multi_body(const MvArgs& a, int n, int per_block, const u8* prep, int stride) {
    extern __shared__ float4 smem4[];
    int t0 = blockIdx.y * per_block, ng = min(per_block, n - t0);
    const int4* src = (const int4*)(prep + (size_t)t0 * stride);
    // The copy as prep_xq's, every piece a cp.async in flight at once (a loop of loads and stores
    // waited for each load). Session 53 (was MOLLA_KDEFS=MULTIASYNC), H100, batch_speed (SmolLM2
    // Q4_1, graph): 16 sequences 6936 tok/s against 5828, 64: 11853 against 10723.
    for (int i = threadIdx.x; i < ng * (stride >> 4); i += blockDim.x) cp_async16(smem_u32(smem4 + i), src + i);
    cp_commit();
    cp_wait<0>();
    float* xs[MV_MULTI];
    Xq xq[MV_MULTI];
    float scale[MV_MULTI];
    __syncthreads();
#pragma unroll
    for (int g = 0; g < MV_MULTI; g++) {
        xs[g] = (float*)((u8*)smem4 + (size_t)(g < ng ? g : 0) * stride);
        xq[g] = xq_at((u8*)(xs[g] + a.cols), a.cols);
        scale[g] = *(const float*)((const u8*)xs[g] + prep_scale_off(a.cols));
    }
    mv_row_trips(a, [&](int si, int r, bool active, int lane, int lanes) {
        if (FX) mv_multi_row<FxAcc>(a, si, r, active, xs, xq, scale, ng, t0, lane, lanes);
        else mv_multi_row<float>(a, si, r, active, xs, xq, scale, ng, t0, lane, lanes);
    });
}

MOLLA_KERNEL void matvec_multi(const MvArgs a, int n, int per_block, const u8* prep, int stride) {
    matvec_multi_body<false>(a, n, per_block, prep, stride);
}

MOLLA_KERNEL void matvec_multi_fx(const MvArgs a, int n, int per_block, const u8* prep, int stride) {
    matvec_multi_body<true>(a, n, per_block, prep, stride);
}
