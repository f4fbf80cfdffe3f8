// Row walks over the q16 unit decoders (q16.cuh): one row's dot product with the quantized input
// a group of lanes at a time, one or two rows a warp straight from global memory (matvec_wide's
// and its head's), several rows or several inputs sharing each unit's loads, and the fixed-point
// row sums (the folded wo's). Every walk adds a row's unit values in the same order, so they all
// give a row the same bits.

// One row's dot product with the quantized input: lane `lane` of a group of `lanes` takes units
// lane, lane + lanes, ...; two units per round, both loaded before either is summed (the second
// clamped to a valid unit and dropped when past the end).
template <int T>
__device__ __forceinline__ float row_dot_q16(const u8* __restrict__ w, const Xq& x, int cols, int lane, int lanes) {
    int nu = q16_units<T>(cols);
    float acc = 0.f;
    for (int u0 = lane; u0 < nu; u0 += 2 * lanes) {
        int u1 = u0 + lanes;
        bool two = u1 < nu;
        int4 x0[8], x1[8];
        load_xu<T>(x, u0, x0);
        load_xu<T>(x, two ? u1 : u0, x1);
        float v0 = unit_q16<T>(w, x0, x, u0);
        float v1 = unit_q16<T>(w, x1, x, two ? u1 : u0);
        acc = __fadd_rn(acc, v0);
        if (two) acc = __fadd_rn(acc, v1);
    }
    return acc;
}

// row_dot_q16 one unit a lane at a time: the same unit values added in the same order, so the
// same bits, in fewer registers (matvec_wide runs four blocks an SM on them). The row is in global
// memory (the 2-byte aligned formats read it with ldg_a2).
template <int T>
__device__ __forceinline__ float row_dot_q16_one(const u8* __restrict__ w, const Xq& x, int cols, int lane) {
    int nu = q16_units<T>(cols);
    float acc = 0.f;
    for (int u = lane; u < nu; u += 32) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        acc = __fadd_rn(acc, unit_q16<T, true>(w, xr, x, u));
    }
    return acc;
}

// row_dot_q16_one of two rows w0, w1 of global memory at once: each unit's input read once and
// both rows' loads in flight together (a head of short rows, where a warp with one row has
// few bytes in flight: the Qwen2.5 head's 896-column Q8_0 rows, 44.5 -> 41.7 us in
// scripts/mvbench). Each row gets row_dot_q16_one's bits (the same unit values, added in the
// same order).
template <int T>
__device__ __forceinline__ void row_dot_q16_two(const u8* __restrict__ w0, const u8* __restrict__ w1, const Xq& x,
                                                int cols, int lane, float& a0, float& a1) {
    int nu = q16_units<T>(cols);
    a0 = 0.f;
    a1 = 0.f;
    for (int u = lane; u < nu; u += 32) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        const float v0 = unit_q16<T, true>(w0, xr, x, u), v1 = unit_q16<T, true>(w1, xr, x, u);
        a0 = __fadd_rn(a0, v0);
        a1 = __fadd_rn(a1, v1);
    }
}

// Fixed-point rows (MvSeg::accumulate 2; the persistent kernel's wo folded into attention,
// PK_OP_ATTN_WO): a row's unit products are each rounded to a multiple of 2^-32 and summed as
// 64-bit integers, exactly, so that the sum has the same bits whatever adds them in whatever
// order (a warp over a row, or every head's blocks adding their units into one word). The sum
// goes to f32 once, then the residual is added (fx_value(sum) + y).
// A product is representable when |v| < 2^22 (v * 2^32 < 2^54, so that a row of up to 511 of
// them sums within a 64-bit integer); NaN, an infinity or a larger value is not: the row is then
// NaN (FxAcc::bad), as an f32 sum would be for the first two. (The persistent kernel's counted
// words hold less: pk_acc_ok.)
__device__ __forceinline__ bool fx_ok(float v) { return fabsf(v) < 4194304.f; }
__device__ __forceinline__ long long fx_of(float v) { return __double2ll_rn((double)v * 4294967296.0); }
__device__ __forceinline__ float fx_value(long long s) { return (float)((double)s * (1.0 / 4294967296.0)); }

// A fixed-point row sum and whether a product was not representable.
struct FxAcc {
    long long s;
    int bad;
};

__device__ __forceinline__ FxAcc group_sum(FxAcc v, int lanes) {
    for (int off = lanes >> 1; off > 0; off >>= 1) {
        v.s += __shfl_xor_sync(0xffffffffu, v.s, off);
        v.bad |= __shfl_xor_sync(0xffffffffu, v.bad, off);
    }
    return v;
}

// A unit's product added to a row's sum: in f32 (the bits row_dot_q16 gives), or in fixed point
// (row_dot_f32_fx's).
__device__ __forceinline__ void unit_add(float& acc, float v) { acc = __fadd_rn(acc, v); }
__device__ __forceinline__ void unit_add(FxAcc& acc, float v) {
    if (fx_ok(v)) acc.s += fx_of(v);
    else acc.bad = 1;
}

// R rows' dot products with the same input (rows w[0 .. nr), nr <= R): each unit's quants are
// read from shared memory once for all rows. Each row gets the same bits as row_dot_q16 (the same
// unit values, added in the same order).
template <int T, int R>
__device__ __forceinline__ void rows_dot_q16(const u8* const* w, int nr, const Xq& x, int cols, int lane, int lanes,
                                             float* acc) {
    int nu = q16_units<T>(cols);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int u = lane; u < nu; u += lanes) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < nr) acc[r] = __fadd_rn(acc[r], unit_q16<T>(w[r], xr, x, u));
    }
}


// rows_dot_q16 for a half-warp (the persistent kernel's PK_PAIR_HALF gate/up pairs): lane h (0..15) of the half gets, for
// each row, what lane h of a whole warp holds after warp_sum's first step (its own sum, units h,
// h + 32, ..., plus lane h + 16's, units h + 16, h + 48, ...: the same adds in the same order),
// so that group_sum(acc, 16) then gives warp_sum's bits. Its two units a trip are independent.
template <int T, int R>
__device__ __forceinline__ void rows_dot_q16_half(const u8* const* w, int nr, const Xq& x, int cols, int h, float* acc) {
    int nu = q16_units<T>(cols);
    float b[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = b[r] = 0.f;
    for (int u = h; u < nu; u += 32) {
        int4 xr[8], xs[8];
        const bool two = u + 16 < nu;
        load_xu<T>(x, u, xr);
        if (two) load_xu<T>(x, u + 16, xs);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < nr) {
                acc[r] = __fadd_rn(acc[r], unit_q16<T>(w[r], xr, x, u));
                if (two) b[r] = __fadd_rn(b[r], unit_q16<T>(w[r], xs, x, u + 16));
            }
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = __fadd_rn(acc[r], b[r]);
}

// One row's dot products with ng <= G inputs (xq[0 .. ng)), each with the bits row_dot_q16 gives
// it alone (the same unit values, added in the same order): a unit's weights are read and
// decoded once for all inputs, and the inputs' sums are independent chains.
template <int T, int G, class A>
__device__ __forceinline__ void row_dot_q16_multi(const u8* __restrict__ w, const Xq* xq, int ng, int cols, int lane,
                                                  int lanes, A* acc) {
    int nu = q16_units<T>(cols);
#pragma unroll
    for (int g = 0; g < G; g++) acc[g] = A{};
    for (int u = lane; u < nu; u += lanes) {
        UnitW uw;
        unit_load<T>(w, u, uw);
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (g < ng) {
                int4 xr[8];
                load_xu<T>(xq[g], u, xr);
                unit_add(acc[g], unit_apply<T>(uw, xr, xq[g], u));
            }
        }
    }
}

// Fixed-point rows (the folded wo and the graph path's rows that must give its bits) are dotted
// with the f32 input, not with its q16 quantization (session 59; q16 before), so that the
// persistent kernel's attention step folds wo with no quantization of the head's output and no
// barrier after it (SmolLM2 Q4_1 +2%, Q8_0 +0.6%, Qwen2.5 +0.5% on an H100). A legacy unit's
// weights (unit_load_legacy's: byte i of word k is weight 4k + i) against its 32 inputs at x
// (16-byte aligned): d * sum((q - o) x), plus m * sum(x) for Q4_1 and Q5_1, each sum in four
// chains (weight j in chain j % 4) added in a fixed order, every operation rounded alone: the
// same bits in every kernel.
template <int T>
__device__ __forceinline__ float unit_f32(const UnitW& uw, const float* x) {
    constexpr int O = T == T_Q4_0 ? 8 : T == T_Q5_0 ? 16 : 0;
    constexpr bool M = T == T_Q4_1 || T == T_Q5_1;
    float c[4] = {0.f, 0.f, 0.f, 0.f}, s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float4 v = ((const float4*)x)[k];
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 b = (uw.w[k] >> (8 * i)) & 0xffu;
            const int q = T == T_Q8_0 ? (int)(signed char)b : (int)b - O;
            c[i] = __fmaf_rn((float)q, e[i], c[i]);
            if constexpr (M) s[i] = __fadd_rn(s[i], e[i]);
        }
    }
    float r = __fmul_rn(uw.f[0], __fadd_rn(__fadd_rn(c[0], c[1]), __fadd_rn(c[2], c[3])));
    if constexpr (M) r = __fadd_rn(r, __fmul_rn(uw.f[1], __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]))));
    return r;
}

// Fixed-point rows of format T against ng <= G f32 inputs xs[0 .. ng), lanes lanes a row
// (row_dot_q16_multi's order: each unit decoded once for all inputs).
template <int T, int G>
__device__ __forceinline__ void row_dot_f32_fx_multi(const u8* __restrict__ w, float* const* xs, int ng, int cols,
                                                     int lane, int lanes, FxAcc* acc) {
#pragma unroll
    for (int g = 0; g < G; g++) acc[g] = FxAcc{};
    for (int u = lane; u < (cols >> 5); u += lanes) {
        UnitW uw;
        unit_load_legacy<T, true>(w + (size_t)u * legacy_bytes<T>(), uw);
#pragma unroll
        for (int g = 0; g < G; g++)
            if (g < ng) unit_add(acc[g], unit_f32<T>(uw, xs[g] + 32 * u));
    }
}

// A fixed-point row of format T against the f32 input x: row_dot_f32_fx_multi for one input.
template <int T>
__device__ __forceinline__ FxAcc row_dot_f32_fx(const u8* __restrict__ w, const float* x, int cols, int lane, int lanes) {
    FxAcc acc;
    float* xs[1] = {(float*)x};
    row_dot_f32_fx_multi<T, 1>(w, xs, 1, cols, lane, lanes, &acc);
    return acc;
}
