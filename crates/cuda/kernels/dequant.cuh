// Dequantization of 8 consecutive weights of a row kept in its GGUF block layout.
//
// dq8<T>(row, c, o) writes elements 8c .. 8c+8 of the row into o[0..8]. Every format keeps such a
// chunk inside one block (and one sub-block), so a chunk needs one block's scales and 8 quants.
// The float operations follow the CPU reference (crates/quant) so results agree to rounding.

// 8 bytes from a 2-byte aligned address, as two little-endian words.
__device__ __forceinline__ void ld8a2(const u8* p, u32& lo, u32& hi) {
    lo = ld32a2(p);
    hi = ld32a2(p + 4);
}

// Byte j (0..8) of the pair (lo, hi).
__device__ __forceinline__ u32 byte_of(u32 lo, u32 hi, int j) { return ((j < 4 ? lo : hi) >> (8 * (j & 3))) & 0xffu; }

// The 6-bit scale and min of sub-block s of Q4_K / Q5_K.
__device__ __forceinline__ void scale_min_k4(int s, const u8* S, int& sc, int& mn) {
    if (s < 4) {
        sc = S[s] & 63;
        mn = S[s + 4] & 63;
    } else {
        sc = (S[s + 4] & 15) | ((S[s - 4] >> 6) << 4);
        mn = (S[s + 4] >> 4) | ((S[s] >> 6) << 4);
    }
}

template <int T>
__device__ __forceinline__ void dq8(const u8* __restrict__ row, int c, float* o) {
    if constexpr (T == T_F32) {
        const float4* p = (const float4*)(row + 32 * (size_t)c);
        float4 a = p[0], b = p[1];
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
        o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    } else if constexpr (T == T_F16 || T == T_BF16) {
        uint4 u = *(const uint4*)(row + 16 * (size_t)c);
        u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if constexpr (T == T_F16) {
                o[2 * j] = h2f((u16)(w[j] & 0xffff));
                o[2 * j + 1] = h2f((u16)(w[j] >> 16));
            } else {
                o[2 * j] = bf2f((u16)(w[j] & 0xffff));
                o[2 * j + 1] = bf2f((u16)(w[j] >> 16));
            }
        }
    } else if constexpr (legacy_padded<T>()) {
        // Padded blocks (LEGPAD, common.cuh): the f32 scale, (Q5_0) qh, the quants.
        constexpr int BYTES = legacy_bytes<T>();
        const u8* b = row + (size_t)(c >> 2) * BYTES;
        int k = c & 3;
        float d = *(const float*)b;
        if constexpr (T == T_Q8_0) {
            u32 lo = ld32(b + 4 + 8 * k), hi = ld32(b + 8 + 8 * k);
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = (float)(i8)byte_of(lo, hi, j) * d;
        } else {
            // Q5_0's qh permuted (q16.cuh pad_quant_words): quant q's fifth bit at 8 (q % 4) + q / 4.
            const int qo = T == T_Q5_0 ? 8 : 4;
            const u32 qh = T == T_Q5_0 ? ld32(b + 4) : 0;
            const u8* q = b + qo + 8 * (k & 1);
            u32 lo = ld32(q), hi = ld32(q + 4);
            int sh = (k >> 1) * 4;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int v = (int)((byte_of(lo, hi, j) >> sh) & 15);
                const int e = 8 * k + j;
                if constexpr (T == T_Q5_0) v = (v | (int)(((qh >> (8 * (e & 3) + (e >> 2))) & 1) << 4)) - 16;
                else v -= 8;
                o[j] = (float)v * d;
            }
        }
    } else if constexpr (T == T_Q4_0) {
        const u8* b = row + (size_t)(c >> 2) * 18;
        int k = c & 3;
        float d = h2f(ld16(b));
        u32 lo, hi;
        ld8a2(b + 2 + 8 * (k & 1), lo, hi);
        int sh = (k >> 1) * 4;
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = (float)((int)((byte_of(lo, hi, j) >> sh) & 15) - 8) * d;
    } else if constexpr (T == T_Q4_1) {
        const u8* b = row + (size_t)(c >> 2) * 20;
        int k = c & 3;
        float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
        const u8* q = b + 4 + 8 * (k & 1);
        u32 lo = ld32(q), hi = ld32(q + 4);
        int sh = (k >> 1) * 4;
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = (float)((byte_of(lo, hi, j) >> sh) & 15) * d + m;
    } else if constexpr (T == T_Q5_0) {
        const u8* b = row + (size_t)(c >> 2) * 22;
        int k = c & 3;
        float d = h2f(ld16(b));
        u32 qh = ld32a2(b + 2) >> (8 * k);
        u32 lo, hi;
        ld8a2(b + 6 + 8 * (k & 1), lo, hi);
        int sh = (k >> 1) * 4;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = (int)(((byte_of(lo, hi, j) >> sh) & 15) | (((qh >> j) & 1) << 4));
            o[j] = (float)(q - 16) * d;
        }
    } else if constexpr (T == T_Q5_1) {
        const u8* b = row + (size_t)(c >> 2) * 24;
        int k = c & 3;
        float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
        u32 qh = ld32(b + 4) >> (8 * k);
        const u8* q = b + 8 + 8 * (k & 1);
        u32 lo = ld32(q), hi = ld32(q + 4);
        int sh = (k >> 1) * 4;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            u32 v = ((byte_of(lo, hi, j) >> sh) & 15) | (((qh >> j) & 1) << 4);
            o[j] = (float)v * d + m;
        }
    } else if constexpr (T == T_Q8_0) {
        const u8* b = row + (size_t)(c >> 2) * 34;
        int k = c & 3;
        float d = h2f(ld16(b));
        u32 lo, hi;
        ld8a2(b + 2 + 8 * k, lo, hi);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = (float)(i8)byte_of(lo, hi, j) * d;
    } else if constexpr (T == T_Q4_K || T == T_Q5_K) {
        const int bytes = T == T_Q4_K ? 144 : 176;
        const int qs_off = T == T_Q4_K ? 16 : 48;
        const u8* b = row + (size_t)(c >> 5) * bytes;
        int e0 = 8 * (c & 31), s = e0 >> 5;
        int sc, mn;
        scale_min_k4(s, b + 4, sc, mn);
        float d = h2f(ld16(b)) * (float)sc, m = h2f(ld16(b + 2)) * (float)mn;
        const u8* q = b + qs_off + 32 * (e0 >> 6) + (e0 & 31);
        u32 lo = ld32(q), hi = ld32(q + 4);
        int sh = ((e0 >> 5) & 1) * 4;
        u32 hlo = 0, hhi = 0;
        if constexpr (T == T_Q5_K) {
            hlo = ld32(b + 16 + (e0 & 31));
            hhi = ld32(b + 20 + (e0 & 31));
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            u32 v = (byte_of(lo, hi, j) >> sh) & 15;
            if constexpr (T == T_Q5_K) v |= ((byte_of(hlo, hhi, j) >> s) & 1) << 4;
            o[j] = d * (float)v - m;
        }
    } else if constexpr (T == T_Q6_K) {
        const u8* b = row + (size_t)(c >> 5) * Q6K_BYTES;
        int e0 = 8 * (c & 31), n = e0 >> 7, k = (e0 >> 5) & 3, l0 = e0 & 31;
        u32 lo, hi, hlo, hhi;
        ld8a2(b + 64 * n + 32 * (k & 1) + l0, lo, hi);
        ld8a2(b + 128 + 32 * n + l0, hlo, hhi);
        float d = h2f(ld16(b + 208)) * (float)(i8)b[192 + (e0 >> 4)];
        int sl = (k >> 1) * 4, sh = 2 * k;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = (int)(((byte_of(lo, hi, j) >> sl) & 15) | (((byte_of(hlo, hhi, j) >> sh) & 3) << 4));
            o[j] = d * (float)(q - 32);
        }
    } else if constexpr (T == T_Q2_K) {
        const u8* b = row + (size_t)(c >> 5) * 84;
        int e0 = 8 * (c & 31), n = e0 >> 7, j2 = (e0 >> 5) & 3, l0 = e0 & 31;
        u32 S = b[e0 >> 4];
        float d = h2f(ld16(b + 80)) * (float)(S & 15), m = h2f(ld16(b + 82)) * (float)(S >> 4);
        const u8* q = b + 16 + 32 * n + l0;
        u32 lo = ld32(q), hi = ld32(q + 4);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = d * (float)((byte_of(lo, hi, j) >> (2 * j2)) & 3) - m;
    } else if constexpr (T == T_Q3_K) {
        const u8* b = row + (size_t)(c >> 5) * 110;
        int e0 = 8 * (c & 31), n = e0 >> 7, j2 = (e0 >> 5) & 3, l0 = e0 & 31, s = e0 >> 4;
        int low = (b[96 + (s & 7)] >> (4 * (s >> 3))) & 15;
        int high = (b[104 + (s & 3)] >> (2 * (s >> 2))) & 3;
        float d = h2f(ld16(b + 108)) * (float)((low | (high << 4)) - 32);
        u32 mlo, mhi, lo, hi;
        ld8a2(b + l0, mlo, mhi);
        ld8a2(b + 32 + 32 * n + l0, lo, hi);
        int hb = e0 >> 5;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = (int)((byte_of(lo, hi, j) >> (2 * j2)) & 3) - (((byte_of(mlo, mhi, j) >> hb) & 1) ? 0 : 4);
            o[j] = d * (float)q;
        }
    }
}

// Runtime dispatch of dq8 (for kernels where the type is uniform per block: embedding, tiles).
__device__ __forceinline__ void dq8_rt(int ty, const u8* row, int c, float* o) {
    switch (ty) {
        case T_F32: dq8<T_F32>(row, c, o); break;
        case T_F16: dq8<T_F16>(row, c, o); break;
        case T_BF16: dq8<T_BF16>(row, c, o); break;
        case T_Q4_0: dq8<T_Q4_0>(row, c, o); break;
        case T_Q4_1: dq8<T_Q4_1>(row, c, o); break;
        case T_Q5_0: dq8<T_Q5_0>(row, c, o); break;
        case T_Q5_1: dq8<T_Q5_1>(row, c, o); break;
        case T_Q8_0: dq8<T_Q8_0>(row, c, o); break;
        case T_Q2_K: dq8<T_Q2_K>(row, c, o); break;
        case T_Q3_K: dq8<T_Q3_K>(row, c, o); break;
        case T_Q4_K: dq8<T_Q4_K>(row, c, o); break;
        case T_Q5_K: dq8<T_Q5_K>(row, c, o); break;
        case T_Q6_K: dq8<T_Q6_K>(row, c, o); break;
        default:
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = __int_as_float(0x7fc00000);  // NaN: unsupported type
    }
}
