// A packed matvec step's rows spread over every thread of the block (MOLLA_KDEFS=SPREAD=N, an
// experiment, session 43; persistent.cu pk_spread_chunk). A warp a row (two rows, or a gate/up
// pair) leaves a block's last round of rows to a few warps while the others wait (Qwen's gate/up:
// 36 or 37 pairs a block on twelve warps, four rounds; its down: seven rows of 152 units on seven
// warps, five units a lane one after another, five warps idle). Here each thread takes units
// (row i / nu, unit i % nu) for i = its index, + the block's threads, ... and stores each unit's
// value in shared memory; after a barrier a warp a row adds them as row_dot_q16 does (lane l
// units l, l + 32, ... in order, then the warp's butterfly): the same unit values added in the
// same order, so the same bits.

#if defined(MOLLA_X_SPREAD) && defined(PK_TYMASK) && defined(PK_PACKED_ONLY)
// Spread a chunk whose rows take at least this many unit rounds a lane as warps take them
// (rounds of rows times units a lane; SPREAD alone: every chunk).
#define PK_SPREAD (MOLLA_X_SPREAD)

// The unit values of a chunk's n rows of nu units each (rows at base0, rb0 bytes apart; PAIR:
// the up rows at base1 as well, dotted with the same input load) into v0[row * nu + unit] (and
// v1[...]).
template <int T, bool PAIR>
__device__ __forceinline__ void pk_spread_units(const u8* base0, const u8* base1, size_t rb0, size_t rb1, int n, int nu,
                                                const Xq& xq, float* v0, float* v1) {
    const int items = n * nu, dr = PK_THREADS / nu, du = PK_THREADS - dr * nu;
    int r = (int)threadIdx.x / nu, u = (int)threadIdx.x - r * nu;
    for (int i = threadIdx.x; i < items; i += PK_THREADS) {
        int4 xr[8];
        load_xu<T>(xq, u, xr);
        v0[i] = unit_q16<T>(base0 + (size_t)r * rb0, xr, xq, u);
        if (PAIR) v1[i] = unit_q16<T>(base1 + (size_t)r * rb1, xr, xq, u);
        r += dr;
        u += du;
        if (u >= nu) {
            u -= nu;
            r++;
        }
    }
}

// Row rr's dot product from its unit values v[rr * nu ..], as row_dot_q16 and warp_sum add them.
__device__ __forceinline__ float pk_spread_sum(const float* v, int rr, int nu, int lane) {
    float acc = 0.f;
    for (int u = lane; u < nu; u += 32) acc = __fadd_rn(acc, v[rr * nu + u]);
    return warp_sum(acc);
}
#endif
