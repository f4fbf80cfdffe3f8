// MOLLA_KDEFS=DOWNFOLD (an experiment, session 45): down folded into the gate/up step, by
// column slices. Each block of a gate/up pair step (PkStep::pair == 2) keeps its rows' SwiGLU
// values h[r0 .. r1) in shared memory instead of handing them over, then adds, for every row of
// down (segment 2 of the record: w[2], ty[2], rows[2], row_bytes[2]), its part over those columns
// into the layer's second accumulator row (y[2], counted words as the folded wo's, pk_acc_red).
// Each product w * h (f32, w as dq8 gives it) is rounded to fixed point on its own, so the sum
// is the same integer whatever the slices. The next RMSNorm step polls the words until each
// counts every block (PREP_FOLD_RMSNORM, the host's count) and takes x + the sum as its input:
// one hand-over a layer fewer, and no block computes a row of gate/up another does (session
// 20's FFNFOLD took whole 32-column units, 2.7x a block's share of the pairs). h is added in
// f32, not quantized. The graph path still computes down as before, so the two paths agree to
// rounding, not bit for bit.
#if defined(MOLLA_X_DOWNFOLD) && defined(PK_TYMASK) && defined(PK_FOLD_WO)
#define PK_DOWN_FOLD(st) ((st).pair == 2)
#ifdef PK_TYMASK_DOWN
#define PK_DF_ON(T) ((((unsigned long long)(PK_TYMASK_DOWN)) >> (T)) & 1ull)
#else
#define PK_DF_ON(T) ((((unsigned long long)(PK_TYMASK)) >> (T)) & 1ull)
#endif

// Row `row`'s part over columns [r0, r1) with h[0 .. r1 - r0): the sum of each product's
// fixed point; `bad` when a product is not finite or not below 2^15.
template <int T>
__device__ __forceinline__ void pk_down_part(const u8* row, const float* hs, int r0, int r1, long long& f, bool& bad) {
    for (int c = r0 >> 3; 8 * c < r1; c++) {
        float o[8];
        dq8<T>(row, c, o);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int col = 8 * c + j;
            if (col >= r0 && col < r1) {
                const float p = __fmul_rn(o[j], hs[col - r0]);
                if (fabsf(p) < 32768.f) f += fx_of(p);
                else bad = true;
            }
        }
    }
}

__device__ __forceinline__ void pk_down_part_ty(int ty, const u8* row, const float* hs, int r0, int r1, long long& f,
                                                bool& bad) {
#define PK_TY_CALL(T)       \
    if (!PK_DF_ON(T)) break; \
    pk_down_part<T>(row, hs, r0, r1, f, bad)
    Q16_DISPATCH(ty, PK_TY_CALL)
#undef PK_TY_CALL
    bad = true;
}

// Asked of L2 as the step begins (by the stagers, while the input is polled): the bytes of every
// down row that hold columns [r0, r1), so that the fold after the pairs reads L2, not HBM.
__device__ __forceinline__ void pk_down_l2(const PkStep& st, int r0, int r1) {
    const int cols = st.rows[0], be = st.ty[2] >= T_Q2_K ? 256 : 32;
    const size_t rb = (size_t)st.row_bytes[2], bb = rb * be / cols;
    const size_t lo = (size_t)(r0 / be) * bb, hi = (size_t)((r1 - 1) / be + 1) * bb;
    const u8* w = st.w[2];
    for (int r = (int)threadIdx.x - PK_STAGE_T0; PK_STAGE_OK(r) && r < st.rows[2]; r += PK_THREADS - PK_STAGE_T0) {
        const u8* row = w + (size_t)r * rb;
        for (size_t o = lo & ~(size_t)127; o < hi; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
    }
}

// The block's part of every down row over its pair rows [r0, r1), whose SwiGLU values are in
// hs (shared memory, behind a barrier). A part must stay below 2^15 (so that at most 255 of them
// stay below 2^23, as pk_acc_ok's products): else it adds 0 and stops the kernel with PK_ERR_FX.
__device__ __forceinline__ void pk_fold_down(const PkStep& st, const PkArgs& a, const float* hs, int r0, int r1,
                                             int step) {
    const u8* w = st.w[2];
    const size_t rb = (size_t)st.row_bytes[2];
    const int ty = st.ty[2], rows = st.rows[2];
    u64* acc = (u64*)st.y[2];
    // Two rows a thread at a time, both rows' loads in flight before either's adds (the adds are
    // asm with a memory clobber, which no load crosses).
    for (int r = threadIdx.x; r < rows; r += 2 * PK_THREADS) {
        long long f[2] = {0, 0};
        bool bad[2] = {false, false};
        const int r2 = r + PK_THREADS;
        pk_down_part_ty(ty, w + (size_t)r * rb, hs, r0, r1, f[0], bad[0]);
        if (r2 < rows) pk_down_part_ty(ty, w + (size_t)r2 * rb, hs, r0, r1, f[1], bad[1]);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (i == 1 && r2 >= rows) break;
            if (bad[i] || f[i] >= (1ll << 47) || f[i] <= -(1ll << 47)) {
                f[i] = 0;
                // (Not in a measurement that leaves stages out: pk_acc_fx's reason.)
                if (!PK_SKIPS(a, PK_SKIP_ROWS | PK_SKIP_ATTN | PK_SKIP_PREP | PK_SKIP_FETCH | PK_SKIP_DOT))
                    atomicCAS(a.err, 0u, PK_ERR_FX | (u32)(step + 1));
            }
            pk_acc_red(acc + (i ? r2 : r), 1, f[i]);
        }
    }
}
#else
#define PK_DOWN_FOLD(st) false
#endif
