// Experiment F32IN (MOLLA_KDEFS=F32IN): decode rows dotted with the f32 input itself, not with its
// 16-bit quantization (q16.cuh), so that no step waits for a quantization pass: the persistent
// kernel's steps, `matvec`, `matvec_fx` and the batched `matvec_multi` of matrices under
// F32_MAX_BYTES in all (the ones the graph path never sends to matvec_wide, which keeps q16:
// launch.rs `wide`), at 32 lanes a row. Every such path computes a row with the same functions
// in the same order, so they still give the same bits.
//
// A row is walked in 32-element units (a legacy block; a Q4_K / Q5_K sub-block; a Q6_K group
// pair), each over 8 lanes: lane j = lane & 7 takes elements 4j .. 4j + 4 (a float4 of the
// input: the 8 lanes read 128 consecutive bytes, no bank conflicts), its quants made floats by a
// byte permute into 2^23's mantissa and one subtraction (full-rate instructions, where
// conversions run at an eighth of the rate).
#ifdef MOLLA_X_F32IN

// Matrices (all segments of a launch or step) of fewer bytes take the f32 input.
#define F32_MAX_BYTES (4u << 20)

// Byte k of w, less `off`, as an exact float.
__device__ __forceinline__ float f32_bytef(u32 w, int k, float off) {
    return __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650u | (u32)k)), 8388608.f + off);
}

// Σ q_i x_i of four quants (bytes of q, less off) with x, in two chains.
__device__ __forceinline__ float f32_quad_sum(u32 q, float off, float4 x) {
    float s0 = __fmul_rn(f32_bytef(q, 0, off), x.x), s1 = __fmul_rn(f32_bytef(q, 1, off), x.y);
    s0 = fmaf(f32_bytef(q, 2, off), x.z, s0);
    s1 = fmaf(f32_bytef(q, 3, off), x.w, s1);
    return __fadd_rn(s0, s1);
}

__device__ __forceinline__ float f32_sum4(float4 x) { return __fadd_rn(__fadd_rn(x.x, x.y), __fadd_rn(x.z, x.w)); }

// Quad j (elements 4j .. 4j + 4) of unit u of the row at w, dotted with x.
template <int T>
__device__ __forceinline__ float f32_quad(const u8* __restrict__ w, int u, int j, float4 x) {
    if constexpr (T == T_Q6_K) {
        const u8* b = w + (size_t)(u >> 3) * Q6K_BYTES;
        const int n = (u & 7) >> 2, G = u & 3;
        const u32 ql = (ld32(b + 64 * n + 32 * (G & 1) + 4 * j) >> (4 * (G >> 1))) & 0x0f0f0f0fu;
        const u32 qh = (ld32(b + 128 + 32 * n + 4 * j) >> (2 * G)) & 0x03030303u;
        const float d = __fmul_rn(h2f(ld16(b + 208)), (float)(i8)b[192 + 8 * n + 2 * G + (j >> 2)]);
        return __fmul_rn(d, f32_quad_sum(ql | (qh << 4), 32.f, x));
    } else if constexpr (T == T_Q4_K || T == T_Q5_K) {
        constexpr int BYTES = T == T_Q4_K ? 144 : 176;
        constexpr int QS = T == T_Q4_K ? 16 : 48;
        const u8* b = w + (size_t)(u >> 3) * BYTES;
        const int sb = u & 7;
        u32 q = (ld32(b + QS + 32 * (sb >> 1) + 4 * j) >> (4 * (sb & 1))) & 0x0f0f0f0fu;
        if constexpr (T == T_Q5_K) q |= ((ld32(b + 16 + 4 * j) >> sb) & 0x01010101u) << 4;
        int sc, mn;
        scale_min_k4(sb, b + 4, sc, mn);
        const float d = __fmul_rn(h2f(ld16(b)), (float)sc), m = __fmul_rn(h2f(ld16(b + 2)), (float)mn);
        return fmaf(-m, f32_sum4(x), __fmul_rn(d, f32_quad_sum(q, 0.f, x)));
    } else {
        const u8* b = w + (size_t)u * legacy_bytes<T>();
        float m = 0.f, off = 0.f;
        u32 q;
        if constexpr (T == T_Q8_0) {
            q = ld32a2(b + 2 + 4 * j) ^ 0x80808080u;
            off = 128.f;
        } else if constexpr (T == T_Q4_0) {
            q = (ld32a2(b + 2 + 4 * (j & 3)) >> (4 * (j >> 2))) & 0x0f0f0f0fu;
            off = 8.f;
        } else if constexpr (T == T_Q4_1) {
            m = h2f(ld16(b + 2));
            q = (ld32(b + 4 + 4 * (j & 3)) >> (4 * (j >> 2))) & 0x0f0f0f0fu;
        } else if constexpr (T == T_Q5_0) {
            q = ((ld32a2(b + 6 + 4 * (j & 3)) >> (4 * (j >> 2))) & 0x0f0f0f0fu) | (spread4(ld32a2(b + 2), j) << 4);
            off = 16.f;
        } else {
            m = h2f(ld16(b + 2));
            q = ((ld32(b + 8 + 4 * (j & 3)) >> (4 * (j >> 2))) & 0x0f0f0f0fu) | (spread4(ld32(b + 4), j) << 4);
        }
        const float r = __fmul_rn(h2f(ld16(b)), f32_quad_sum(q, off, x));
        if constexpr (T == T_Q4_1 || T == T_Q5_1) return fmaf(m, f32_sum4(x), r);
        return r;
    }
}

// R rows' dot products (rows w[0 .. nr), nr <= R, of type T) with the input xs (times xw, the
// RMSNorm weights, when not null: each x * w rounded, as load_input rounds them), at 32 lanes a
// row; each lane's share, to be summed over the warp. Every row gets the bits it gets alone.
template <int T, int R>
__device__ __forceinline__ void rows_dot_f32(const u8* const* w, int nr, const float* xs, const float* xw, int cols,
                                             int lane, float* acc) {
    // MOLLA_KDEFS=F32IN,F32L4 (a variant): four lanes a unit, two quads each, eight units a round.
#ifdef MOLLA_X_F32L4
    constexpr int LPU = 4;
#else
    constexpr int LPU = 8;
#endif
    const int nu = cols >> 5;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int u = lane / LPU; u < nu; u += 32 / LPU) {
#pragma unroll
        for (int h = 0; h < 8 / LPU; h++) {
            const int j = (8 / LPU) * (lane % LPU) + h;
            float4 x = *(const float4*)(xs + 32 * u + 4 * j);
            if (xw) {
                const float4 ww = *(const float4*)(xw + 32 * u + 4 * j);
                x.x = __fmul_rn(x.x, ww.x), x.y = __fmul_rn(x.y, ww.y), x.z = __fmul_rn(x.z, ww.z),
                x.w = __fmul_rn(x.w, ww.w);
            }
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nr) acc[r] = __fadd_rn(acc[r], f32_quad<T>(w[r], u, j, x));
        }
    }
}

// Unit u of the row at w against its 32 inputs x, by one thread (fixed-point rows: the folded wo
// and matvec_fx): its quads in order.
template <int T>
__device__ __forceinline__ float unit_f32(const u8* __restrict__ w, int u, const float* x) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) acc = __fadd_rn(acc, f32_quad<T>(w, u, j, *(const float4*)(x + 4 * j)));
    return acc;
}

// A fixed-point row: each unit's product (unit_f32) rounded and summed as the folded wo adds them.
template <int T>
__device__ __forceinline__ FxAcc row_dot_f32_fx(const u8* __restrict__ w, const float* xs, int cols, int lane, int lanes) {
    FxAcc acc{};
    for (int u = lane; u < (cols >> 5); u += lanes) unit_add(acc, unit_f32<T>(w, u, xs + 32 * u));
    return acc;
}

// Runs CALL(T) and returns for the formats these rows cover (those of q16.cuh); falls through for
// the others.
#define F32_DISPATCH(ty, CALL)                 \
    switch (ty) {                              \
        case T_Q4_0: CALL(T_Q4_0); return;     \
        case T_Q4_1: CALL(T_Q4_1); return;     \
        case T_Q5_0: CALL(T_Q5_0); return;     \
        case T_Q5_1: CALL(T_Q5_1); return;     \
        case T_Q8_0: CALL(T_Q8_0); return;     \
        case T_Q4_K: CALL(T_Q4_K); return;     \
        case T_Q5_K: CALL(T_Q5_K); return;     \
        case T_Q6_K: CALL(T_Q6_K); return;     \
        default: break;                        \
    }

#endif
