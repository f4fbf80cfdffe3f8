// MOLLA_KDEFS=X8 (an experiment, with the split staging only): a packed step's rows expanded in
// shared memory by the staging threads, once their copies land and while the first 128 threads
// still wait for the step's input (q16_rows.cuh x8_expand_units, rows_dot_x8). A legacy unit's 32
// quants become bytes (16-byte aligned: two 16-byte loads), Q4_0's and Q5_0's less their offset,
// its d and m two f32 (q16.cuh x8_expand, unit_x8): where a Q5_0 unit took eleven 2-byte loads,
// their joins and 32 instructions spreading its fifth bits on every row dot, it takes three
// loads. With X8K a K-quant unit too becomes the words and scales unit_load decodes (its nibbles,
// bits and 6-bit scales taken apart once a step, not on every row dot). The same integer sums and
// float operations, so the same bits (cuda_host_check). A gate/up pair of two types keeps its
// raw rows (x8_at).
//
// The expanded area follows the block's copy (16 d.end[2] bytes) and 16 bytes of room for the
// raw words' overread: every expanded matrix's quants (a row of `cols` weights: `cols` bytes),
// then their headers (cols / 4 bytes a row). persistent/config.rs mark_packed leaves room for
// it.

#if defined(MOLLA_X_X8) && !defined(MOLLA_X_NOSPLIT)
#define PK_X8 1

// Whether rows of ggml type t are expanded: a legacy format (with X8K a K-quant too) the kernel
// was built for.
#ifdef MOLLA_X_X8K
#define PK_X8K true
#else
#define PK_X8K false
#endif
__device__ __forceinline__ bool x8_on(int t) {
    const bool q16 = t == T_Q4_0 || t == T_Q4_1 || t == T_Q5_0 || t == T_Q5_1 || t == T_Q8_0 || (PK_X8K && x8_kquant(t));
#ifdef PK_TYMASK
    return q16 && (((unsigned long long)(PK_TYMASK) >> t) & 1ull);
#else
    return q16;
#endif
}

// The type of matrix j (0, or 1 of a pair) of chunk k.
__device__ __forceinline__ int x8_ty(const PkStep& st, const PkBlk& d, int k, int j) {
    return st.ty[st.pair ? j : d.seg[k]];
}

// Where matrix j of chunk k of block entry d has its expanded rows (byte offsets in the chunk
// buffers): quants at q (the chunk's row i at q + 32 nu i), d and m at h (at h + 8 nu i). False
// when its type is not expanded, and for a gate/up pair of two types (rows_dot_x8 takes one type
// for both rows: such a pair keeps its raw rows, unexpanded).
__device__ __forceinline__ bool x8_at(const PkStep& st, const PkBlk& d, int k, int j, int& q, int& h) {
    const int nu = st.cols >> 5, base = 16 * d.end[2] + 16;
    int total = 0, before = 0;
    bool on = false;
    q = h = 0;
    if (st.pair && st.ty[0] != st.ty[1]) return false;
    for (int kk = 0; kk < d.nch; kk++)
        for (int jj = 0; jj < (st.pair ? 2 : 1); jj++) {
            if (!x8_on(x8_ty(st, d, kk, jj))) continue;
            if (kk == k && jj == j) {
                before = total;
                on = true;
            }
            total += (d.rb[kk] - d.ra[kk]) * nu;
        }
    q = base + 32 * before;
    h = base + 32 * total + 8 * before;
    return on;
}

// x8_expand_units for type ty, n of its units (Q16_DISPATCH returns after its call: a function of
// its own).
__device__ __forceinline__ void x8_expand_ty(int ty, const u8* raw, int rbytes, int cols, int rows, u8* q, u8* h, int t,
                                             int nt) {
#define X8_CALL(T) \
    if (x8_on(T)) x8_expand_units<T>(raw, rbytes, q16_units<T>(cols), rows * q16_units<T>(cols), q, h, t, nt)
    Q16_DISPATCH(ty, X8_CALL)
#undef X8_CALL
}

// rows_dot_x8<T, R> for type ty (NaN for one the kernel was not built for).
template <int R>
__device__ __forceinline__ void x8_rows_ty(int ty, const u8* const* q, const u8* const* h, int nr, const Xq& x, int cols,
                                           int lane, float* acc) {
#define X8_CALL(T)        \
    if (!x8_on(T)) break; \
    rows_dot_x8<T, R>(q, h, nr, x, cols, lane, acc)
    Q16_DISPATCH(ty, X8_CALL)
#undef X8_CALL
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = __int_as_float(0x7fc00000);
}

// The staging threads' barrier (cuda_host_check runs them one after another without it).
#ifndef PK_X8_SYNC
#define PK_X8_SYNC() asm volatile("bar.sync 2, %0;" ::"n"(PK_THREADS - PK_POLLERS) : "memory")
#endif

// The staging threads' expansion of the block's rows of packed step st (d: its entry), once every
// staging thread's copies landed (a named barrier of theirs); the step's input barrier then makes
// them visible to the block.
__device__ void x8_expand_rows(const PkStep& st, const PkBlk& d, u8* bufs) {
    if (!PK_STAGER(threadIdx.x)) return;
    cp_wait<0>();
    PK_X8_SYNC();
    const int t = threadIdx.x - PK_POLLERS, nt = PK_THREADS - PK_POLLERS;
    for (int k = 0; k < d.nch; k++)
        for (int j = 0; j < (st.pair ? 2 : 1); j++) {
            int q, h;
            if (!x8_at(st, d, k, j, q, h)) continue;
            const int rbytes = st.row_bytes[st.pair ? j : d.seg[k]];
            x8_expand_ty(x8_ty(st, d, k, j), bufs + (j ? d.row1 : d.row0[k]), rbytes, st.cols, d.rb[k] - d.ra[k],
                         bufs + q, bufs + h, t, nt);
        }
}

#else
#define PK_X8 0
#endif

// X8LATE (with X8): a normed input's rows expanded by the staging threads after their share of
// RMSNorm's sum, beside the input's quantization, instead of before the input arrives (where
// they hold back the input's barrier when it arrives before their copies land).
#if PK_X8 && defined(MOLLA_X_X8LATE)
#define PK_X8LATE_PARAMS , bool x8_late, const PkBlk &x8d, u8 *bufs
#else
#define PK_X8LATE_PARAMS
#endif
