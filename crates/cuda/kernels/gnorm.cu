// MOLLA_KDEFS=GNORM (an experiment, session 61; session 54's next call 2): the big models' RMSNorm
// inputs prepared by the launch that computes x, not by a preparation launch of their own. On the
// graph path each layer's two RMSNorm preparations (matvec_prep_wide after down and after wo)
// cost 2.06 us a launch on the H200's 8B, 131.7 us of its 2120 a token (session 54's ladder).
//
// The producer (wo or down, accumulated onto x) runs in blocks of 1024 threads that own 32
// consecutive rows each, a warp a row: the block's 32 new values of x are then one q16 block of
// the next RMSNorm's input x * w (quantized as matvec_prep_wide quantizes it: the same bits), and
// their sum of squares in f64 one partial of the scale's sum. The consumer (q/k/v, gate/up, the
// head) adds the partials in a fixed order (lane l the groups l, l + 32, ..., then the lanes by
// xor shuffles) for the scale. That order is not rms_scale's (a thread a strided run of values),
// so the scale can differ from the preparation launch's in its last bit: only models the
// persistent kernel does not decode use it (forward/gnorm.rs `CudaModel::gnorm`), whose graph-replayed and
// plainly launched steps both take it (the same bits between them).
#ifdef MOLLA_X_GNORM

// Where a grouped row's partial sums (one f64 a group of 32 values) lie in a preparation buffer:
// after the scale's 16 bytes (launch/gnorm.rs `gnorm_stride`).
__device__ __forceinline__ int gn_part_off(int cols) { return prep_scale_off(cols) + 16; }

// Groups a lane adds at most (rows of up to 8192 values).
#define GN_MAX_PER_LANE 8

// matvec_wide on an input whose q16 row and partial sums matvec_wide_gnp left at prep (mode 6):
// the partials' loads are issued before the row's copy, their sum after it.
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide_gnc(const MvArgs a, const u8* prep) {
    extern __shared__ float4 smem4[];
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31, ng = a.cols >> 5;
    const double* p = (const double*)(prep + gn_part_off(a.cols));
    double v[GN_MAX_PER_LANE];
#pragma unroll
    for (int k = 0; k < GN_MAX_PER_LANE; k++) v[k] = lane + 32 * k < ng ? __ldcg(p + lane + 32 * k) : 0.0;
    const Xq xq = prep_xq(a, prep, smem4);
    double t = 0.0;
#pragma unroll
    for (int k = 0; k < GN_MAX_PER_LANE; k++) t += v[k];
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    wide_rows(a, xq, (float)rsqrt(fma(t, 1.0 / a.cols, (double)a.eps)));
}

// The rows of a (one segment accumulated onto its output x, not fixed point), a warp a row, block
// b the rows 32 b .. 32 b + 31, on the input prepared at prep (as matvec_wide); then the next
// RMSNorm's input quantized into the preparation buffer gp: the block's 32 new values times the
// norm weights gw as q16 block b, and their squares' sum (f64: lane i squaring value i, then xor
// shuffles) as partial b.
MOLLA_KERNEL void __launch_bounds__(1024, 1) matvec_wide_gnp(const MvArgs a, const u8* prep, const float* gw, u8* gp) {
    extern __shared__ float4 smem4[];
    __shared__ float xn[32];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = lane & 3, n = a.seg[0].rows;
    // The norm weights depend on no kernel before.
    float w[8];
    if (warp == 0) load8(gw + 32 * blockIdx.x + 8 * part, w);
    pdl_wait();
    const Xq xq = prep_xq(a, prep, smem4);
    const float scale = prep_scale(a, prep);
    bool lean;
    const u32 xa = lean_xa(xq, lane, lean);
    const int r = 32 * blockIdx.x + warp;
    float acc = 0.f;
    wide_row_dot(a.seg[0], r, xq, a.cols, lane, lean, xa, acc);
    acc = warp_sum(acc);
    if (lane == 0) xn[warp] = mv_store(a.seg[0], 0, r, mv_scaled(acc, scale));
    __syncthreads();
    if (warp == 0) {
        float q[8];
#pragma unroll
        for (int j = 0; j < 8; j++) q[j] = __fmul_rn(xn[8 * part + j], w[j]);
        q16_block(q, blockIdx.x, part, lane < 4, n, gp + (size_t)n * 4);
        const double e = xn[lane];
        double s = e * e;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) ((double*)(gp + gn_part_off(n)))[blockIdx.x] = s;
    }
}
#endif
