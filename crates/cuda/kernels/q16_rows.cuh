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
// (row_dot_q16_fx's).
__device__ __forceinline__ void unit_add(float& acc, float v) { acc = __fadd_rn(acc, v); }
__device__ __forceinline__ void unit_add(FxAcc& acc, float v) {
    if (fx_ok(v)) acc.s += fx_of(v);
    else acc.bad = 1;
}

// row_dot_q16's units summed in fixed point (G: the row read as row_dot_q16_one reads it).
template <int T, bool G>
__device__ __forceinline__ FxAcc row_dot_q16_fx(const u8* __restrict__ w, const Xq& x, int cols, int lane, int lanes) {
    int nu = q16_units<T>(cols);
    FxAcc acc{};
    for (int u = lane; u < nu; u += lanes) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        unit_add(acc, unit_q16<T, G>(w, xr, x, u));
    }
    return acc;
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


// One row's dot products with ng <= G inputs (xq[0 .. ng)), each with the bits row_dot_q16 gives
// it alone (the same unit values, added in the same order), or row_dot_q16_fx's (A: FxAcc):
// a unit's weights are read and decoded once for all inputs, and the inputs' sums are
// independent chains.
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

// MOLLA_KDEFS=X8 (an experiment; kernels/persistent_x8.cuh): rows expanded in shared memory and
// their dot products. A legacy block (a unit of 32 weights) becomes 32 quant bytes and its d, m
// as f32 (q16.cuh x8_expand: 40 bytes); a K-quant unit of 64 weights its decoded words and four
// f32 as unit_load leaves them (80 bytes): a row of `cols` weights takes `cols` bytes of quants
// and cols / 4 of headers either way.
__device__ __forceinline__ constexpr bool x8_kquant(int t) { return t == T_Q4_K || t == T_Q5_K || t == T_Q6_K; }

// Expands n units of type T whose rows (nu units, rbytes bytes each) start at raw, into q and h,
// thread t of nt taking every nt-th unit.
template <int T>
__device__ __forceinline__ void x8_expand_units(const u8* raw, int rbytes, int nu, int n, u8* q, u8* h, int t, int nt) {
    for (int i = t; i < n; i += nt) {
        const int r = i / nu, u = i - r * nu;
        if constexpr (x8_kquant(T)) {
            UnitW uw;
            unit_load<T>(raw + r * rbytes, u, uw);
#pragma unroll
            for (int k = 0; k < 4; k++)
                ((uint4*)(q + 64 * i))[k] = make_uint4(uw.w[4 * k], uw.w[4 * k + 1], uw.w[4 * k + 2], uw.w[4 * k + 3]);
            ((float4*)(h + 16 * i))[0] = make_float4(uw.f[0], uw.f[1], uw.f[2], uw.f[3]);
        } else {
            // The block's bytes as nine words (its 2-byte aligned start's aligned words, shifted).
            u32 w[9], o[8];
            ldg_a2<9, false>(raw + r * rbytes + u * legacy_bytes<T>(), w);
            float hd[2];
            x8_expand<T>(w, o, hd);
            ((uint4*)(q + 32 * i))[0] = make_uint4(o[0], o[1], o[2], o[3]);
            ((uint4*)(q + 32 * i))[1] = make_uint4(o[4], o[5], o[6], o[7]);
            ((float2*)(h + 8 * i))[0] = make_float2(hd[0], hd[1]);
        }
    }
}

// rows_dot_q16<T, R> on expanded rows (quants q[r], headers h[r]): the same unit values (unit_x8,
// or unit_apply on unit_load's words) added in the same order, so the same bits.
template <int T, int R>
__device__ __forceinline__ void rows_dot_x8(const u8* const* q, const u8* const* h, int nr, const Xq& x, int cols, int lane,
                                            float* acc) {
    const int nu = q16_units<T>(cols);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int u = lane; u < nu; u += 32) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= nr) continue;
            float v;
            if constexpr (x8_kquant(T)) {
                UnitW uw;
                const uint4* qq = (const uint4*)(q[r] + 64 * u);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint4 a = qq[k];
                    uw.w[4 * k] = a.x, uw.w[4 * k + 1] = a.y, uw.w[4 * k + 2] = a.z, uw.w[4 * k + 3] = a.w;
                }
                const float4 f = ((const float4*)h[r])[u];
                uw.f[0] = f.x, uw.f[1] = f.y, uw.f[2] = f.z, uw.f[3] = f.w;
                v = unit_apply<T>(uw, xr, x, u);
            } else {
                v = unit_x8<T == T_Q4_1 || T == T_Q5_1>((const u32*)(q[r] + 32 * u), ((const float2*)h[r])[u], xr, x, u);
            }
            acc[r] = __fadd_rn(acc[r], v);
        }
    }
}
