// Decode dot products on activations quantized to 16 bits, as the CPU's q16 kernels compute them
// (crates/quant/src/q16), but for the scale: the input row is quantized once per matvec into
// blocks of 32 with dx a power of two (max|x| / dx in [2^14, 2^15); the CPU's dx is max|x| / 32767)
// and i16 quants; each weight block's product with those quants is an exact
// integer sum (dp2a: two i16 x two i8 products a instruction), scaled once per block in f32.
// Against the float path this removes the per-weight int-to-float conversions and halves the
// shared-memory reads of the input, which is what limited the decode matvec (issue 6).
//
// Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (a unit is one block of 32 weights), Q4_K, Q5_K (a unit is
// one pair of sub-blocks: 64 weights), Q6_K (a unit is 4 groups of 16: 64 weights). The others
// keep the float path (row_dot_ty picks).

// The quantized input row in shared memory: `q` (cols i16 in 16-byte slots of 8, swizzled: see
// xq_slot; padded to whole 128-byte lines), then per block of 32 `dx` and `sx` (dx Σ q, the
// block's sum as its quants give it), then per run of 16 `s16` (Σ q, exact).
struct Xq {
    const int4* q;
    const float* dx;
    const float* sx;
    const int* s16;
};

// Where slot s (values 8s .. 8s+8) of the quants lives: its 128-byte line's slots are permuted
// by the line index, so the lanes of a quarter-warp that read the same slot of different blocks
// (every row decoder does) hit different banks. A block's slots stay in one line.
__device__ __forceinline__ int xq_slot(int s) { return s ^ ((s >> 3) & 7); }

__host__ __device__ __forceinline__ int xq_qbytes(int cols) { return (2 * cols + 127) & ~127; }

// Bytes of shared memory a quantized row of `cols` values takes (a multiple of 16).
__host__ __device__ __forceinline__ int xq_bytes(int cols) { return (xq_qbytes(cols) + cols / 8 + cols / 8 + cols / 4 + 15) & ~15; }

__device__ __forceinline__ Xq xq_at(u8* base, int cols) {
    Xq x;
    x.q = (const int4*)base;
    x.dx = (const float*)(base + xq_qbytes(cols));
    x.sx = x.dx + cols / 32;
    x.s16 = (const int*)(x.sx + cols / 32);
    return x;
}

// c + the products of a's two i16 halves with bytes 0, 1 (lo) or 2, 3 (hi) of b: signed bytes,
// or with U unsigned ones (0 .. 255).
template <bool U = false>
__device__ __forceinline__ int dp2a_lo(int a, u32 b, int c) {
    int d;
    if constexpr (U) asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

template <bool U = false>
__device__ __forceinline__ int dp2a_hi(int a, u32 b, int c) {
    int d;
    if constexpr (U) asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// x rounded to the nearest integer, ties to even, and clamped to i16 (PTX's float-to-integer
// conversions saturate; NaN gives 0).
__device__ __forceinline__ int f2i16_rn(float x) {
    short h;
    asm("cvt.rni.s16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

// Values 8 part .. 8 part + 8 of block b of 32 (v), quantized into the Xq of a `cols`-wide row at
// `base` by the four consecutive lanes part = 0..3 of a warp (shuffles: every lane of the warp
// calls it); stored only when `live`.
__device__ __forceinline__ void q16_block(const float* v, int b, int part, bool live, int cols, u8* base) {
    int4* q4 = (int4*)base;
    float* dx = (float*)(base + xq_qbytes(cols));
    float* sx = dx + cols / 32;
    int* s16 = (int*)(sx + cols / 32);
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) m = fmaxf(m, fabsf(v[i]));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    // NaN: fmaxf drops it, so look for one explicitly and make the block's scale NaN.
    int nan = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) nan |= (int)(v[i] != v[i]);
    nan |= __shfl_xor_sync(0xffffffffu, nan, 1);
    nan |= __shfl_xor_sync(0xffffffffu, nan, 2);
    // The scale is a power of two (session 46): d = 2^(E - 14) for the largest magnitude m in
    // [2^E, 2^(E+1)), so |v| / d < 2^15 and each quant is v times 1 / d, an exact product, rounded
    // and clamped to i16 (|q| <= 32768): no division on the step's critical path (m / 32767 and
    // 32767 / m before, 1 bit more of each block's range). m under 1e-30: zeros and d = 0; m
    // infinite: zeros and d infinite.
    int qi[8], t = 0;
    float d = 0.f;
    const u32 eb = __float_as_uint(m) >> 23;  // m >= 0: its biased exponent
    if (!(m < 1e-30f) && eb < 255u) {
        const float inv = __uint_as_float((268u - eb) << 23);
#pragma unroll
        for (int i = 0; i < 8; i++) qi[i] = f2i16_rn(__fmul_rn(v[i], inv));
        d = __uint_as_float((eb - 14u) << 23);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) qi[i] = 0;
        if (!(m < 1e-30f)) d = __int_as_float(0x7f800000);
    }
    if (nan) d = __int_as_float(0x7fc00000);
#pragma unroll
    for (int i = 0; i < 8; i++) t += qi[i];
    t += __shfl_xor_sync(0xffffffffu, t, 1);
    // sx: d times the quants' sum (exact, |sum| <= 2^20), the block's sum as its quants give it.
    const float sum = __fmul_rn(d, (float)(t + __shfl_xor_sync(0xffffffffu, t, 2)));
    if (live) {
        int4 o;
        o.x = (qi[0] & 0xffff) | (qi[1] << 16);
        o.y = (qi[2] & 0xffff) | (qi[3] << 16);
        o.z = (qi[4] & 0xffff) | (qi[5] << 16);
        o.w = (qi[6] & 0xffff) | (qi[7] << 16);
        q4[xq_slot(4 * b + part)] = o;
        if (part == 0) {
            dx[b] = d;
            sx[b] = sum;
        }
        if ((part & 1) == 0) s16[2 * b + (part >> 1)] = t;
    }
}

// The trips of a row's quantization: four threads a block of 32, eight values each, which
// load(i, live, v) gives (values i .. i+8; live: the block is in the row). Every thread takes
// every trip (the shuffles need whole warps); past the end it computes on block 0 and stores
// nothing. No barrier: the caller's makes the row visible to the block. NT: the block's threads
// when known at compile time (the persistent kernel: no division by a run-time count), else 0.
template <int NT, class Load>
__device__ __forceinline__ void quantize_trips(int cols, u8* base, Load load) {
    int nb = cols >> 5, part = threadIdx.x & 3;
    int per = NT ? NT >> 2 : (int)(blockDim.x >> 2), trips = (nb + per - 1) / per;
    for (int it = 0; it < trips; it++) {
        int b0 = it * per + (threadIdx.x >> 2);
#ifdef MOLLA_X_QSKIP
        // A warp with no block of the row in this trip skips it (the whole warp alike, so the
        // others' shuffles are whole): the attention fold's 64 values take one warp, not all.
        if (it * per + (int)((threadIdx.x & ~31u) >> 2) >= nb) continue;
#endif
        bool live = b0 < nb;
        int b = live ? b0 : 0;
        float v[8];
        load(32 * b + 8 * part, live, v);
        q16_block(v, b, part, live, cols, base);
    }
}

// Quantizes xs[0..cols) (whole blocks of 32) into the Xq at `base` (two 16-byte loads, one
// 16-byte store a thread); no barrier (quantize_q16 adds it).
template <int NT = 0>
__device__ __forceinline__ void quantize_q16_unsynced(const float* xs, int cols, u8* base) {
    quantize_trips<NT>(cols, base, [&](int i, bool, float* v) {
        const float4* src = (const float4*)(xs + i);
        float4 va = src[0], vb = src[1];
        v[0] = va.x, v[1] = va.y, v[2] = va.z, v[3] = va.w, v[4] = vb.x, v[5] = vb.y, v[6] = vb.z, v[7] = vb.w;
    });
}

// quantize_q16_unsynced, then a barrier: the row is ready for the block.
__device__ void quantize_q16(const float* xs, int cols, u8* base) {
    quantize_q16_unsynced(xs, cols, base);
    __syncthreads();
}

// quantize_q16 of RMSNorm's row with its scale left out: each value v of xs becomes v * w[i]
// (load_input's row: the scale multiplies the dot products) before it is quantized; the raw
// values are copied to raw, xs is left as it is. No barrier: the caller's.
template <int NT>
__device__ void quantize_q16_w(const float* xs, int cols, u8* base, const float* w, float* raw) {
    quantize_trips<NT>(cols, base, [&](int i0, bool live, float* v) {
        float4 va = ((const float4*)(xs + i0))[0], vb = ((const float4*)(xs + i0))[1];
        float4 wa = ((const float4*)(w + i0))[0], wb = ((const float4*)(w + i0))[1];
        float r[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
        float ww[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fmul_rn(r[j], ww[j]);
        if (live) {
            ((float4*)(raw + i0))[0] = va;
            ((float4*)(raw + i0))[1] = vb;
        }
    });
}

// Σ w·xq over N4 words of four byte-sized weights (element 4k + i in byte i of word k; U:
// unsigned bytes) and the quants in xr (N4 / 2 slots of 8, loaded by load_xu), exact.
template <int N4, bool U = false>
__device__ __forceinline__ int idot(const u32* w, const int4* xr) {
    // Two chains: integer sums are exact in any order, and dp2a's latency is the limit.
    int s = 0, t = 0;
#pragma unroll
    for (int k = 0; k < N4; k += 2) {
        int4 xv = xr[k >> 1];
        s = dp2a_lo<U>(xv.x, w[k], s);
        t = dp2a_hi<U>(xv.y, w[k], t);
        s = dp2a_lo<U>(xv.z, w[k + 1], s);
        t = dp2a_hi<U>(xv.w, w[k + 1], t);
    }
    return s + t;
}

// Slot s of the quants (xq_slot: within one line for the runs a unit reads).
__device__ __forceinline__ int4 xq_ld(const Xq& x, int s) { return x.q[xq_slot(s)]; }

// (a * b) * c, rounded after each product: the unit sums below use only _rn operations, which
// the compiler never contracts into FMAs, so every kernel that inlines them (graph matvec,
// persistent, one row or several at a time) gets the same bits.
__device__ __forceinline__ float mul3(float a, float b, float c) { return __fmul_rn(__fmul_rn(a, b), c); }

// Bits 4k .. 4k+4 of v, one a byte (bit 0 of each byte).
__device__ __forceinline__ u32 spread4(u32 v, int k) { return (((v >> (4 * k)) & 15u) * 0x00204081u) & 0x01010101u; }

// 16 bytes from a 2-byte aligned address.
__device__ __forceinline__ void ld16a2(const u8* p, u32* w) {
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = ld32a2(p + 4 * k);
}

// The N4 words ldg_a2 makes of the N4 + 1 aligned words x at shift sh (16 when p is 2 mod 4).
template <int N4>
__device__ __forceinline__ void a2_shift(const u32* x, u32 sh, u32* w) {
#pragma unroll
    for (int k = 0; k < N4; k++) w[k] = __funnelshift_r(x[k], x[k + 1], sh);
}

// 4 N4 bytes from a 2-byte aligned address in global memory: N4 + 1 aligned words through the
// read-only path, funnel-shifted into place (ld16a2 takes two 2-byte loads a word, which makes
// Q6_K rows of global memory stream at 1.4 TB/s on the H200 against 1.8 TB/s this way:
// scripts/mvbench). Reads up to 4 bytes past the end (matrices have 16 bytes of slack).
// G = false: plain loads, for shared memory (a Q8_0 unit's 32 quants in 9 loads where ld16a2
// takes 16), which MOLLA_KDEFS=A2WORDS (an experiment) uses for the legacy formats' rows there;
// the persistent kernel's packed rows leave 16 bytes of its buffers free for the overread
// (persistent.rs).
template <int N4, bool G = true>
__device__ __forceinline__ void ldg_a2(const u8* p, u32* w) {
    // (Shared memory: p less its offset, pointer arithmetic, so that the compiler still knows
    // the address space and emits shared loads, not generic ones.)
    const u32* a = G ? (const u32*)((size_t)p & ~(size_t)3) : (const u32*)(p - ((size_t)p & 2));
    u32 sh = (u32)((size_t)p & 2) * 8;
    u32 x[N4 + 1];
#pragma unroll
    for (int k = 0; k <= N4; k++) x[k] = G ? __ldg(a + k) : a[k];
    a2_shift<N4>(x, sh, w);
}

#ifndef MOLLA_X_Q6FILE
// 16 bytes from a 16-byte aligned address (G: global memory, through the read-only path).
template <bool G>
__device__ __forceinline__ void ld16al(const u8* p, u32* w) {
    uint4 v = G ? __ldg((const uint4*)p) : *(const uint4*)p;
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
}
#endif

// A padded block's words: the f32 scale at b and N words from b + 4 (G: global memory, through
// the read-only path).
template <bool G>
__device__ __forceinline__ float pad_d(const u8* b) {
    return G ? __ldg((const float*)b) : *(const float*)b;
}
template <int N, bool G>
__device__ __forceinline__ void pad_words(const u8* p, u32* w) {
#pragma unroll
    for (int k = 0; k < N; k++) w[k] = G ? __ldg((const u32*)p + k) : ((const u32*)p)[k];
}

// A unit's bytes as loaded from its row, before any arithmetic on them (raw_k45, raw_q6k).
struct UnitRaw {
    uint4 v[5];
};

#ifdef MOLLA_X_A2WORDS
#define Q16_A2WORDS true
#else
#define Q16_A2WORDS false
#endif

// A 4- or 5-bit legacy block's quants as idot's eight words of bytes: the low nibbles of its 16
// quant bytes qs, then the high ones, with Q5_0's / Q5_1's fifth bits from qh on top.
template <int T>
__device__ __forceinline__ void legacy_quant_words(const u32* qs, u32 qh, u32* w) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        w[k] = qs[k] & 0x0f0f0f0fu;
        w[k + 4] = (qs[k] >> 4) & 0x0f0f0f0fu;
        if constexpr (T == T_Q5_0 || T == T_Q5_1) {
            w[k] |= spread4(qh, k) << 4;
            w[k + 4] |= spread4(qh, k + 4) << 4;
        }
    }
}

// A padded block's quants (LEGPAD, legacy_padded) as idot's eight words: Q8_0's bytes, Q4_0's
// as legacy_quant_words makes them, Q5_0's likewise with the fifth bits from its qh word, which
// the host stores permuted (weights.rs `pad_legacy`): bit 8i + k holds quant 4k + i's, so that
// word k's four fifth bits are one shift and mask away (bits 4, 12, 20, 28 of qh << 4 >> k), not
// spread4's four operations.
template <int T, bool G>
__device__ __forceinline__ void pad_quant_words(const u8* b, u32* w) {
    if constexpr (T == T_Q8_0) {
        pad_words<8, G>(b + 4, w);
    } else if constexpr (T == T_Q5_0) {
        u32 qs[4], qh;
        pad_words<1, G>(b + 4, &qh);
        pad_words<4, G>(b + 8, qs);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[k] = (qs[k] & 0x0f0f0f0fu) | ((qh << (4 - k)) & 0x10101010u);
            w[k + 4] = ((qs[k] >> 4) & 0x0f0f0f0fu) | ((qh >> k) & 0x10101010u);
        }
    } else {
        u32 qs[4];
        pad_words<4, G>(b + 4, qs);
        legacy_quant_words<T>(qs, 0, w);
    }
}

// One 32-weight block of a legacy format: the block's contribution to the row's dot product. G: the
// row is in global memory, and the 2-byte aligned runs (Q8_0, Q4_0, Q5_0) are read with ldg_a2's
// aligned words (the same bytes, so the same bits; else 2-byte loads, which shared memory needs).
template <int T, bool G = false>
__device__ __forceinline__ float unit_legacy(const u8* __restrict__ b, const int4* xr, const Xq& x, int u) {
    u32 w[8];
    if constexpr (legacy_padded<T>()) {
        // LEGPAD: the f32 scale, then (Q5_0) qh, then the quants, in aligned words.
        pad_quant_words<T, G>(b, w);
        int s = idot<8>(w, xr);
        if constexpr (T == T_Q4_0) s -= 8 * (x.s16[2 * u] + x.s16[2 * u + 1]);
        if constexpr (T == T_Q5_0) s -= 16 * (x.s16[2 * u] + x.s16[2 * u + 1]);
        return mul3(pad_d<G>(b), x.dx[u], (float)s);
    } else if constexpr (T == T_Q8_0) {
        float d = h2f(ld16(b));
        if constexpr (G) {
            ldg_a2<4>(b + 2, w);
            ldg_a2<4>(b + 18, w + 4);
        } else if (Q16_A2WORDS) {
            ldg_a2<8, false>(b + 2, w);
        } else {
            ld16a2(b + 2, w);
            ld16a2(b + 18, w + 4);
        }
        return mul3(d, x.dx[u], (float)idot<8>(w, xr));
    } else {
        u32 qs[4], qh = 0;
        float d = h2f(ld16(b)), m = 0.f;
        if constexpr (T == T_Q4_0) {
            if constexpr (G) ldg_a2<4>(b + 2, qs);
            else if (Q16_A2WORDS) ldg_a2<4, false>(b + 2, qs);
            else ld16a2(b + 2, qs);
        }
        if constexpr (T == T_Q4_1 || T == T_Q5_1) {
            if (!G && Q16_A2WORDS) {
                // d and m in one word (these blocks are 4-byte aligned).
                const u32 dm = ld32(b);
                d = h2f((u16)dm);
                m = h2f((u16)(dm >> 16));
            } else {
                m = h2f(ld16(b + 2));
            }
        }
        if constexpr (T == T_Q4_1) {
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = ld32(b + 4 + 4 * k);
        }
        if constexpr (T == T_Q5_0) {
            if constexpr (G) {
                u32 h1[1];
                ldg_a2<1>(b + 2, h1);
                qh = h1[0];
                ldg_a2<4>(b + 6, qs);
            } else if (Q16_A2WORDS) {
                u32 hq[5];
                ldg_a2<5, false>(b + 2, hq);
                qh = hq[0];
#pragma unroll
                for (int k = 0; k < 4; k++) qs[k] = hq[k + 1];
            } else {
                qh = ld32a2(b + 2);
                ld16a2(b + 6, qs);
            }
        }
        if constexpr (T == T_Q5_1) {
            qh = ld32(b + 4);
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = ld32(b + 8 + 4 * k);
        }
        legacy_quant_words<T>(qs, qh, w);
        int s = idot<8>(w, xr);
        if constexpr (T == T_Q4_0) s -= 8 * (x.s16[2 * u] + x.s16[2 * u + 1]);
        if constexpr (T == T_Q5_0) s -= 16 * (x.s16[2 * u] + x.s16[2 * u + 1]);
        float r = mul3(d, x.dx[u], (float)s);
        if constexpr (T == T_Q4_1 || T == T_Q5_1) r = __fadd_rn(r, __fmul_rn(m, x.sx[u]));
        return r;
    }
}

// Q4_K / Q5_K unit u: super-block u >> 2, pair j = u & 3 of sub-blocks (2j, 2j+1): 32 quant bytes
// whose low nibbles are sub-block 2j and high nibbles sub-block 2j+1 (Q5_K: bits 2j and 2j+1 of
// the 32 qh bytes on top). Its bytes: the header (d, dmin, scales), the quants, Q5_K's qh.
template <int T>
__device__ __forceinline__ void raw_k45(const u8* __restrict__ w, int u, UnitRaw& r) {
    constexpr int BYTES = T == T_Q4_K ? 144 : 176;
    constexpr int QS = T == T_Q4_K ? 16 : 48;
    const u8* b = w + (size_t)(u >> 2) * BYTES;
    int j = u & 3;
    r.v[0] = *(const uint4*)b;
    r.v[1] = *(const uint4*)(b + QS + 32 * j);
    r.v[2] = *(const uint4*)(b + QS + 32 * j + 16);
    if constexpr (T == T_Q5_K) {
        r.v[3] = *(const uint4*)(b + 16);
        r.v[4] = *(const uint4*)(b + 32);
    }
}

template <int T>
__device__ __forceinline__ float apply_k45(const UnitRaw& r, const int4* xr, const Xq& x, int u) {
    int j = u & 3;
    uint4 h = r.v[0], qa = r.v[1], qb = r.v[2];
    u32 q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    u32 lo[8], hi[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        lo[k] = q[k] & 0x0f0f0f0fu;
        hi[k] = (q[k] >> 4) & 0x0f0f0f0fu;
    }
    if constexpr (T == T_Q5_K) {
        uint4 ha = r.v[3], hb = r.v[4];
        u32 qh[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            lo[k] |= ((qh[k] >> (2 * j)) & 0x01010101u) << 4;
            hi[k] |= ((qh[k] >> (2 * j + 1)) & 0x01010101u) << 4;
        }
    }
    // 6-bit scales and mins of sub-blocks 2j and 2j+1 (scale_min_k4 on the header words).
    int sc[2], mn[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int s = 2 * j + e;
        int sl = 8 * (s & 3);
        u32 y = h.y >> sl, z = h.z >> sl, ww = h.w >> sl;
        int lo_sc = (int)(y & 63), lo_mn = (int)(z & 63);
        int hi_sc = (int)((ww & 15) | (((y >> 6) & 3) << 4));
        int hi_mn = (int)(((ww >> 4) & 15) | (((z >> 6) & 3) << 4));
        sc[e] = s < 4 ? lo_sc : hi_sc;
        mn[e] = s < 4 ? lo_mn : hi_mn;
    }
    float d = h2f((u16)(h.x & 0xffff)), dm = h2f((u16)(h.x >> 16));
    int b0 = 8 * (u >> 2) + 2 * j;
    int s0 = idot<8>(lo, xr), s1 = idot<8>(hi, xr + 4);
    float p0 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[0]), x.dx[b0], (float)s0), __fmul_rn(__fmul_rn(dm, (float)mn[0]), x.sx[b0]));
    float p1 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[1]), x.dx[b0 + 1], (float)s1),
                         __fmul_rn(__fmul_rn(dm, (float)mn[1]), x.sx[b0 + 1]));
    return __fadd_rn(p0, p1);
}

template <int T>
__device__ __forceinline__ float unit_k45(const u8* __restrict__ w, const int4* xr, const Xq& x, int u) {
    UnitRaw r;
    raw_k45<T>(w, u, r);
    return apply_k45<T>(r, xr, x, u);
}

// Q6_K unit u: super-block u >> 2, half n = (u >> 1) & 1, h = u & 1: groups G = 0..3 of 16 elements
// 128n + 32G + 16h + i, from ql[64n + 16h + i] (G 0, 2: low, high nibble), ql[64n + 32 + 16h + i]
// (G 1, 3) and bits 2G of qh[32n + 16h + i]; scale 8n + 2G + h. Blocks padded to 224 bytes
// (Q6K_BYTES) are read with aligned vector loads; in the file's 210-byte layout (MOLLA_X_Q6FILE)
// a block is only 2-byte aligned, and G (the row in global memory) reads its 2-byte aligned runs
// with ldg_a2's aligned words (the same bytes, so the same bits; else 2-byte loads, which rows
// staged in shared memory need).
// Its bytes: the two quant runs A, B and the high bits H; with G the half's 8 scales (S2, the
// words of v[3].x / .y) and d's 16 bits (v[3].z). (Without G the scales are read from the row
// as the unit needs them.)
template <bool G = false>
__device__ __forceinline__ void raw_q6k(const u8* __restrict__ w, int u, UnitRaw& r) {
    const u8* b = w + (size_t)(u >> 2) * Q6K_BYTES;
    int n = (u >> 1) & 1, hf = u & 1;
    u32 A[4], B[4], H[4], S2[2] = {0, 0};
#ifndef MOLLA_X_Q6FILE
    ld16al<G>(b + 64 * n + 16 * hf, A);
    ld16al<G>(b + 64 * n + 32 + 16 * hf, B);
    ld16al<G>(b + 128 + 32 * n + 16 * hf, H);
    if constexpr (G) {
        uint2 s2 = __ldg((const uint2*)(b + 192 + 8 * n));  // the half's 8 scales
        S2[0] = s2.x, S2[1] = s2.y;
    }
#else
    if constexpr (G) {
        ldg_a2<4>(b + 64 * n + 16 * hf, A);
        ldg_a2<4>(b + 64 * n + 32 + 16 * hf, B);
        ldg_a2<4>(b + 128 + 32 * n + 16 * hf, H);
        ldg_a2<2>(b + 192 + 8 * n, S2);  // the half's 8 scales
    } else {
        ld16a2(b + 64 * n + 16 * hf, A);
        ld16a2(b + 64 * n + 32 + 16 * hf, B);
        ld16a2(b + 128 + 32 * n + 16 * hf, H);
    }
#endif
    r.v[0] = make_uint4(A[0], A[1], A[2], A[3]);
    r.v[1] = make_uint4(B[0], B[1], B[2], B[3]);
    r.v[2] = make_uint4(H[0], H[1], H[2], H[3]);
    r.v[3] = make_uint4(S2[0], S2[1], ld16(b + 208), 0u);
}

// Unit u of the Q6_K row at w from its bytes r (raw_q6k<G>).
template <bool G = false>
__device__ __forceinline__ float apply_q6k(const UnitRaw& r, const u8* __restrict__ w, const int4* xr, const Xq& x,
                                           int u) {
    int n = (u >> 1) & 1, hf = u & 1;
    const u32 A[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w}, B[4] = {r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
    const u32 H[4] = {r.v[2].x, r.v[2].y, r.v[2].z, r.v[2].w}, S2[2] = {r.v[3].x, r.v[3].y};
    float d = h2f((u16)r.v[3].z);
    const u8* S = w + (size_t)(u >> 2) * Q6K_BYTES + 192 + 8 * n + hf;
    float acc = 0.f;
#pragma unroll
    for (int G4 = 0; G4 < 4; G4++) {
        u32 wq[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u32 l = (G4 & 1) ? B[k] : A[k];
            wq[k] = ((l >> (4 * (G4 >> 1))) & 0x0f0f0f0fu) | (((H[k] >> (2 * G4)) & 0x03030303u) << 4);
        }
        int bb = 8 * (u >> 2) + 4 * n + G4;
        int s = idot<4>(wq, xr + 2 * G4) - 32 * x.s16[2 * bb + hf];
        if constexpr (G) {
            int si = 2 * G4 + hf;
            i8 sc = (i8)((S2[si >> 2] >> (8 * (si & 3))) & 0xffu);
            acc = __fadd_rn(acc, mul3(__fmul_rn(d, (float)sc), x.dx[bb], (float)s));
        } else {
            acc = __fadd_rn(acc, mul3(__fmul_rn(d, (float)(i8)S[2 * G4]), x.dx[bb], (float)s));
        }
    }
    return acc;
}

template <bool G = false>
__device__ __forceinline__ float unit_q6k(const u8* __restrict__ w, const int4* xr, const Xq& x, int u) {
    UnitRaw r;
    raw_q6k<G>(w, u, r);
    return apply_q6k<G>(r, w, xr, x, u);
}

// The quants unit u of a row of format T reads, into registers: legacy formats 4 slots (a block
// of 32), Q4_K / Q5_K 8 (two blocks), Q6_K 2 for each of its 4 groups.
template <int T>
__device__ __forceinline__ void load_xu(const Xq& x, int u, int4* xr) {
    if constexpr (T == T_Q4_K || T == T_Q5_K) {
#pragma unroll
        for (int k = 0; k < 8; k++) xr[k] = xq_ld(x, 8 * u + k);
    } else if constexpr (T == T_Q6_K) {
        int n = (u >> 1) & 1, hf = u & 1;
#pragma unroll
        for (int G = 0; G < 4; G++) {
            int bb = 8 * (u >> 2) + 4 * n + G;
            xr[2 * G] = xq_ld(x, 4 * bb + 2 * hf);
            xr[2 * G + 1] = xq_ld(x, 4 * bb + 2 * hf + 1);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) xr[k] = xq_ld(x, 4 * u + k);
    }
}

// Unit u of the row at w, dotted with its quants xr (load_xu). G: the row is in global memory (the
// 2-byte aligned formats then read it with ldg_a2).
template <int T, bool G = false>
__device__ __forceinline__ float unit_q16(const u8* __restrict__ w, const int4* xr, const Xq& x, int u) {
    if constexpr (T == T_Q4_K || T == T_Q5_K) return unit_k45<T>(w, xr, x, u);
    else if constexpr (T == T_Q6_K) return unit_q6k<G>(w, xr, x, u);
    else {
        constexpr int BYTES = legacy_bytes<T>();
        return unit_legacy<T, G>(w + (size_t)u * BYTES, xr, x, u);
    }
}

// A unit's weights decoded into registers, for row_dot_q16_multi, which decodes each unit once
// for all its inputs. The same arithmetic as unit_legacy / unit_k45 / unit_q6k, split in two
// (those stay whole: the single-row decoders are what the persistent kernel inlines, and
// splitting them changes its register allocation); tests/batch.rs checks that a batched row
// has the bits of the same row decoded alone. Legacy formats: the 32 weights
// as bytes in w[0..8), d and m (Q4_1, Q5_1) in f[0..2). Q4_K / Q5_K: the two sub-blocks' weights
// in w[0..8) and w[8..16), d * scale and dmin * min of each in f[0], f[1] and f[2], f[3]. Q6_K:
// group G's 16 weights in w[4G..4G+4), d * its scale in f[G].
struct UnitW {
    u32 w[16];
    float f[4];
};

// unit_legacy's decode of the block at b, for row_dot_q16_multi. G: the block is in global
// memory and its 2-byte aligned runs are read as unit_legacy<T, true> reads them (ldg_a2's
// aligned words through the read-only path; the same bytes): the fixed-point rows (q16_rows.cuh
// unit_f32).
template <int T, bool G = false>
__device__ __forceinline__ void unit_load_legacy(const u8* __restrict__ b, UnitW& uw) {
    if constexpr (legacy_padded<T>()) {
        // LEGPAD, as unit_legacy reads it.
        uw.f[0] = pad_d<G>(b);
        uw.f[1] = 0.f;
        pad_quant_words<T, G>(b, uw.w);
        return;
    }
    uw.f[0] = h2f(ld16(b));
    if constexpr (T == T_Q8_0) {
        if constexpr (G) {
            ldg_a2<4>(b + 2, uw.w);
            ldg_a2<4>(b + 18, uw.w + 4);
        } else {
            ld16a2(b + 2, uw.w);
            ld16a2(b + 18, uw.w + 4);
        }
    } else {
        u32 qs[4], qh = 0;
        uw.f[1] = 0.f;
        if constexpr (T == T_Q4_0) {
            if constexpr (G) ldg_a2<4>(b + 2, qs);
            else ld16a2(b + 2, qs);
        }
        if constexpr (T == T_Q4_1) {
            uw.f[1] = h2f(ld16(b + 2));
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = ld32(b + 4 + 4 * k);
        }
        if constexpr (T == T_Q5_0) {
            if constexpr (G) {
                u32 h1[1];
                ldg_a2<1>(b + 2, h1);
                qh = h1[0];
                ldg_a2<4>(b + 6, qs);
            } else {
                qh = ld32a2(b + 2);
                ld16a2(b + 6, qs);
            }
        }
        if constexpr (T == T_Q5_1) {
            uw.f[1] = h2f(ld16(b + 2));
            qh = ld32(b + 4);
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = ld32(b + 8 + 4 * k);
        }
        legacy_quant_words<T>(qs, qh, uw.w);
    }
}

// The legacy block u's contribution to the row's dot product with the quants xr of its input x.
template <int T>
__device__ __forceinline__ float unit_apply_legacy(const UnitW& uw, const int4* xr, const Xq& x, int u) {
    int s = idot<8>(uw.w, xr);
    if constexpr (T == T_Q4_0) s -= 8 * (x.s16[2 * u] + x.s16[2 * u + 1]);
    if constexpr (T == T_Q5_0) s -= 16 * (x.s16[2 * u] + x.s16[2 * u + 1]);
    float r = mul3(uw.f[0], x.dx[u], (float)s);
    if constexpr (T == T_Q4_1 || T == T_Q5_1) r = __fadd_rn(r, __fmul_rn(uw.f[1], x.sx[u]));
    return r;
}

// unit_k45's decode of unit u, for row_dot_q16_multi.
template <int T>
__device__ __forceinline__ void unit_load_k45(const u8* __restrict__ w, int u, UnitW& uw) {
    constexpr int BYTES = T == T_Q4_K ? 144 : 176;
    constexpr int QS = T == T_Q4_K ? 16 : 48;
    const u8* b = w + (size_t)(u >> 2) * BYTES;
    int j = u & 3;
    uint4 h = *(const uint4*)b;
    uint4 qa = *(const uint4*)(b + QS + 32 * j), qb = *(const uint4*)(b + QS + 32 * j + 16);
    u32 q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uw.w[k] = q[k] & 0x0f0f0f0fu;
        uw.w[k + 8] = (q[k] >> 4) & 0x0f0f0f0fu;
    }
    if constexpr (T == T_Q5_K) {
        uint4 ha = *(const uint4*)(b + 16), hb = *(const uint4*)(b + 32);
        u32 qh[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uw.w[k] |= ((qh[k] >> (2 * j)) & 0x01010101u) << 4;
            uw.w[k + 8] |= ((qh[k] >> (2 * j + 1)) & 0x01010101u) << 4;
        }
    }
    // 6-bit scales and mins of sub-blocks 2j and 2j+1 (scale_min_k4 on the header words).
    float d = h2f((u16)(h.x & 0xffff)), dm = h2f((u16)(h.x >> 16));
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int s = 2 * j + e;
        int sl = 8 * (s & 3);
        u32 y = h.y >> sl, z = h.z >> sl, ww = h.w >> sl;
        int lo_sc = (int)(y & 63), lo_mn = (int)(z & 63);
        int hi_sc = (int)((ww & 15) | (((y >> 6) & 3) << 4));
        int hi_mn = (int)(((ww >> 4) & 15) | (((z >> 6) & 3) << 4));
        uw.f[2 * e] = __fmul_rn(d, (float)(s < 4 ? lo_sc : hi_sc));
        uw.f[2 * e + 1] = __fmul_rn(dm, (float)(s < 4 ? lo_mn : hi_mn));
    }
}

template <int T>
__device__ __forceinline__ float unit_apply_k45(const UnitW& uw, const int4* xr, const Xq& x, int u) {
    int b0 = 8 * (u >> 2) + 2 * (u & 3);
    int s0 = idot<8>(uw.w, xr), s1 = idot<8>(uw.w + 8, xr + 4);
    float p0 = __fsub_rn(mul3(uw.f[0], x.dx[b0], (float)s0), __fmul_rn(uw.f[1], x.sx[b0]));
    float p1 = __fsub_rn(mul3(uw.f[2], x.dx[b0 + 1], (float)s1), __fmul_rn(uw.f[3], x.sx[b0 + 1]));
    return __fadd_rn(p0, p1);
}

// unit_q6k's decode of unit u, for row_dot_q16_multi.
__device__ __forceinline__ void unit_load_q6k(const u8* __restrict__ w, int u, UnitW& uw) {
    const u8* b = w + (size_t)(u >> 2) * Q6K_BYTES;
    int n = (u >> 1) & 1, hf = u & 1;
    u32 A[4], B[4], H[4];
#ifndef MOLLA_X_Q6FILE
    ld16al<false>(b + 64 * n + 16 * hf, A);
    ld16al<false>(b + 64 * n + 32 + 16 * hf, B);
    ld16al<false>(b + 128 + 32 * n + 16 * hf, H);
#else
    ld16a2(b + 64 * n + 16 * hf, A);
    ld16a2(b + 64 * n + 32 + 16 * hf, B);
    ld16a2(b + 128 + 32 * n + 16 * hf, H);
#endif
    float d = h2f(ld16(b + 208));
    const u8* S = b + 192 + 8 * n + hf;
#pragma unroll
    for (int G = 0; G < 4; G++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u32 l = (G & 1) ? B[k] : A[k];
            uw.w[4 * G + k] = ((l >> (4 * (G >> 1))) & 0x0f0f0f0fu) | (((H[k] >> (2 * G)) & 0x03030303u) << 4);
        }
        uw.f[G] = __fmul_rn(d, (float)(i8)S[2 * G]);
    }
}

__device__ __forceinline__ float unit_apply_q6k(const UnitW& uw, const int4* xr, const Xq& x, int u) {
    int n = (u >> 1) & 1, hf = u & 1;
    float acc = 0.f;
#pragma unroll
    for (int G = 0; G < 4; G++) {
        int bb = 8 * (u >> 2) + 4 * n + G;
        int s = idot<4>(uw.w + 4 * G, xr + 2 * G) - 32 * x.s16[2 * bb + hf];
        acc = __fadd_rn(acc, mul3(uw.f[G], x.dx[bb], (float)s));
    }
    return acc;
}

// Unit u of the row at w decoded into uw.
template <int T>
__device__ __forceinline__ void unit_load(const u8* __restrict__ w, int u, UnitW& uw) {
    if constexpr (T == T_Q4_K || T == T_Q5_K) unit_load_k45<T>(w, u, uw);
    else if constexpr (T == T_Q6_K) unit_load_q6k(w, u, uw);
    else {
        constexpr int BYTES = legacy_bytes<T>();
        unit_load_legacy<T>(w + (size_t)u * BYTES, uw);
    }
}

// Decoded unit u dotted with the quants xr (load_xu) of input x: its contribution to the row.
template <int T>
__device__ __forceinline__ float unit_apply(const UnitW& uw, const int4* xr, const Xq& x, int u) {
    if constexpr (T == T_Q4_K || T == T_Q5_K) return unit_apply_k45<T>(uw, xr, x, u);
    else if constexpr (T == T_Q6_K) return unit_apply_q6k(uw, xr, x, u);
    else return unit_apply_legacy<T>(uw, xr, x, u);
}

template <int T>
__device__ __forceinline__ int q16_units(int cols) {
    return (T == T_Q4_K || T == T_Q5_K || T == T_Q6_K) ? cols >> 6 : cols >> 5;
}
