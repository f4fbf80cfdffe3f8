// Row walks with the next unit's bytes in flight (experiment WIDEPIPE, MOLLA_KDEFS=WIDEPIPE; Q4_K
// and Q6_K, which carry the 8B's weights, and Q8_0, the Qwen2.5-0.5B file's head).
// matvec_wide's lane takes units lane, lane + 32, ... of a row and, in row_dot_q16_one, loads
// each unit only when it computes it: a lane waits on HBM once per unit (two a 4096-wide Q4_K
// row, seven a 14336-wide down row), and between those waits it has nothing in flight. Here a
// lane asks for unit n + 32's bytes (UnitRaw: raw_q8, raw_k45, raw_q6k) before it computes unit
// n, and for the next row's first unit before it computes its last, so that it always has a load
// in flight. The units, their arithmetic and the order of their sum are row_dot_q16_one's: the
// same bits.

// Whether rows of type ty take the pipelined walk: Q4_K (most of a Q4_K_M file's bytes), and with
// MOLLA_KDEFS=WIDEPIPE,WIDEPIPEALL also Q6_K and Q8_0 (session 29: with those in matvec_wide,
// ptxas spills 22 bytes under the 64-register cap, none with Q4_K alone; session 23's build of all
// three did not spill). Q5_K's high bits would hold five more registers across the walk.
__device__ __forceinline__ bool pipe_ty(int ty) {
#ifdef MOLLA_X_WIDEPIPEALL
    return ty == T_Q4_K || ty == T_Q6_K || ty == T_Q8_0;
#else
    return ty == T_Q4_K;
#endif
}

template <int T>
__device__ __forceinline__ void raw_unit(const u8* __restrict__ w, int u, UnitRaw& r) {
    if constexpr (T == T_Q6_K) raw_q6k<true>(w, u, r);
    else if constexpr (T == T_Q8_0) raw_q8(w, u, r);
    else raw_k45<T>(w, u, r);
}

template <int T>
__device__ __forceinline__ float apply_unit(const UnitRaw& r, const u8* __restrict__ w, const int4* xr, const Xq& x,
                                            int u) {
    if constexpr (T == T_Q6_K) return apply_q6k<true>(r, w, xr, x, u);
    else if constexpr (T == T_Q8_0) return apply_q8(r, w, xr, x, u);
    else return apply_k45<T>(r, xr, x, u);
}

// Unit `lane`'s bytes of the row at w (type ty, a pipe_ty), when the row has that unit.
__device__ __forceinline__ void raw_first(int ty, const u8* __restrict__ w, int cols, int lane, UnitRaw& r) {
    if (ty == T_Q4_K && lane < q16_units<T_Q4_K>(cols)) raw_unit<T_Q4_K>(w, lane, r);
    else if (ty == T_Q6_K && lane < q16_units<T_Q6_K>(cols)) raw_unit<T_Q6_K>(w, lane, r);
    else if (ty == T_Q8_0 && lane < q16_units<T_Q8_0>(cols)) raw_unit<T_Q8_0>(w, lane, r);
}

// row_dot_q16_one of the row at w with unit `lane`'s bytes in `cur` already; leaves in `cur` unit
// `lane` of the row at `next` (null: none, or a row of another type).
template <int T>
__device__ __forceinline__ float row_dot_q16_pipe(const u8* __restrict__ w, const u8* __restrict__ next, const Xq& x,
                                                  int cols, int lane, UnitRaw& cur) {
    const int nu = q16_units<T>(cols);
    float acc = 0.f;
    for (int u = lane; u < nu; u += 32) {
        UnitRaw nxt = cur;
        if (u + 32 < nu) raw_unit<T>(w, u + 32, nxt);
        else if (next) raw_unit<T>(next, lane, nxt);
        int4 xr[8];
        load_xu<T>(x, u, xr);
        acc = __fadd_rn(acc, apply_unit<T>(cur, w, xr, x, u));
        cur = nxt;
    }
    return acc;
}

// row_dot_q16_pipe by weight type (a pipe_ty); `next` is only read when its type is ty.
__device__ __forceinline__ float row_dot_pipe_ty(int ty, const u8* __restrict__ w, const u8* __restrict__ next,
                                                 const Xq& x, int cols, int lane, UnitRaw& cur) {
    if (ty == T_Q4_K) return row_dot_q16_pipe<T_Q4_K>(w, next, x, cols, lane, cur);
    if (ty == T_Q8_0) return row_dot_q16_pipe<T_Q8_0>(w, next, x, cols, lane, cur);
    return row_dot_q16_pipe<T_Q6_K>(w, next, x, cols, lane, cur);
}
