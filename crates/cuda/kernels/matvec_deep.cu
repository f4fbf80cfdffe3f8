// Experiment WIDEDEEP (MOLLA_KDEFS=WIDEDEEP=D, D units in flight a lane, default 3;
// WIDEMINB=B, blocks an SM the registers are capped for, default 3): matvec_wide for matrices
// of one type (Q4_K, Q6_K or Q8_0, every segment; launch.rs picks it), each lane's units walked
// as one stream of (row, unit) items: the warp's rows g0, g0 + stride, ..., and in each the
// lane's units lane, lane + 32, ... A lane asks for item i + D's bytes as soon as it has computed
// item i, so that D of its loads are in flight where matvec_wide has one (and WIDEPIPE two):
// the 8B's q/k/v and wo matrices are about 1.5 rows a warp, each row two units a lane, so
// matvec_wide waits on HBM three or four times in a row. The units, their arithmetic and the
// order of each row's sum are row_dot_q16_one's: the same bits.
#ifdef MOLLA_X_WIDEDEEP
#if MOLLA_X_WIDEDEEP > 1
#define WIDE_DEPTH MOLLA_X_WIDEDEEP
#else
#define WIDE_DEPTH 3
#endif
#ifndef MOLLA_X_WIDEMINB
#define MOLLA_X_WIDEMINB 3
#endif

// The weights of the launch's row g (over its segments) and where its output goes.
__device__ __forceinline__ const u8* deep_row(const MvArgs& a, int g, int& si, int& r) {
    si = 0;
    r = g;
    while (si < a.nseg - 1 && r >= a.seg[si].rows) {
        r -= a.seg[si].rows;
        si++;
    }
    return a.seg[si].w + (size_t)r * a.seg[si].row_bytes;
}

template <int T>
__device__ __forceinline__ void wide_deep(const MvArgs& a, const u8* prep, float4* smem) {
    constexpr int D = WIDE_DEPTH;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, stride = gridDim.x * warps;
    const int g0 = blockIdx.x * warps + (threadIdx.x >> 5), total = mv_total(a);
    const int nu = q16_units<T>(a.cols), upl = (nu + 31) >> 5;
    const int n = g0 < total ? ((total - 1 - g0) / stride + 1) * upl : 0;
    // The next item to ask for: row fg, the lane's unit lane + 32 fj.
    int fg = g0, fj = 0;
    auto fetch = [&](UnitRaw& b) {
        if (fg < total) {
            const int u = lane + 32 * fj;
            int si, r;
            if (u < nu) raw_unit<T>(deep_row(a, fg, si, r), u, b);
            if (++fj == upl) fj = 0, fg += stride;
        }
    };
    UnitRaw buf[D];
#pragma unroll
    for (int k = 0; k < D; k++) fetch(buf[k]);
    // The weights depend on no kernel before; the input does.
    pdl_wait();
    const Xq xq = prep_xq(a, prep, smem);
    const float scale = prep_scale(a, prep);
    int cg = g0, cj = 0, si, r;
    const u8* row = deep_row(a, cg, si, r);
    float acc = 0.f;
    for (int i0 = 0; i0 < n; i0 += D) {
#pragma unroll
        for (int k = 0; k < D; k++) {
            if (i0 + k < n) {
                const int u = lane + 32 * cj;
                if (u < nu) {
                    int4 xr[8];
                    load_xu<T>(xq, u, xr);
                    acc = __fadd_rn(acc, apply_unit<T>(buf[k], row, xr, xq, u));
                }
                fetch(buf[k]);
                if (++cj == upl) {
                    acc = warp_sum(acc);
                    if (lane == 0) mv_store(a.seg[si], 0, r, mv_scaled(acc, scale));
                    acc = 0.f;
                    cj = 0;
                    cg += stride;
                    if (cg < total) row = deep_row(a, cg, si, r);
                }
            }
        }
    }
}

// Rows of one type of Q4_K, Q6_K, Q8_0 (every segment; not fixed-point rows), as matvec_wide.
MOLLA_KERNEL void __launch_bounds__(256, MOLLA_X_WIDEMINB) matvec_wide_deep(const MvArgs a, const u8* prep) {
    KTRACE(5);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    switch (a.seg[0].ty) {
        case T_Q4_K: wide_deep<T_Q4_K>(a, prep, smem4); break;
        case T_Q6_K: wide_deep<T_Q6_K>(a, prep, smem4); break;
        case T_Q8_0: wide_deep<T_Q8_0>(a, prep, smem4); break;
        default: break;
    }
}
#endif
