// Legacy blocks (q16.cuh's units of 32 weights) decoded from their bytes as aligned words: the
// persistent kernel's folded wo loading its first unit early (MOLLA_KDEFS=FOLDREG), and packed
// rows expanded in shared memory (MOLLA_KDEFS=X8, q16_rows.cuh x8_expand_units). Experiments: the
// same bits as q16.cuh's decoders (scripts/cuda_host_check.py).

// A legacy block's bytes as early loads (MOLLA_KDEFS=FOLDREG: the persistent kernel's folded wo
// asks for its block before the attention it waits for): the ten aligned words from the block's
// 2-byte aligned start b rounded down, through the read-only path (up to 6 bytes past the block:
// matrices have 16 bytes of slack), and the shift that puts b's first byte at bit 0.
struct LegacyWords {
    u32 x[10];
    u32 sh;
};

__device__ __forceinline__ void legacy_words(const u8* __restrict__ b, LegacyWords& r) {
    const u32* a = (const u32*)((size_t)b & ~(size_t)3);
#pragma unroll
    for (int k = 0; k < 10; k++) r.x[k] = __ldg(a + k);
    r.sh = (u32)((size_t)b & 2) * 8;
}

// unit_load_legacy's decode of a legacy block from its bytes as words (w[k]: bytes 4k .. 4k + 4;
// nine of them): the same bytes into the same words, so that unit_apply_legacy gives the same
// bits.
template <int T>
__device__ __forceinline__ void unit_words_decode(const u32* w, UnitW& uw) {
    // The block's bytes 4k + 2 .. 4k + 6.
    auto at2 = [&](int k) { return __funnelshift_r(w[k], w[k + 1], 16); };
    uw.f[0] = h2f((u16)(w[0] & 0xffffu));
    if constexpr (T == T_Q8_0) {
#pragma unroll
        for (int k = 0; k < 8; k++) uw.w[k] = at2(k);
    } else {
        u32 qs[4], qh = 0;
        uw.f[1] = 0.f;
        if constexpr (T == T_Q4_0) {
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = at2(k);
        }
        if constexpr (T == T_Q4_1) {
            uw.f[1] = h2f((u16)(w[0] >> 16));
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = w[1 + k];
        }
        if constexpr (T == T_Q5_0) {
            qh = at2(0);
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = at2(1 + k);
        }
        if constexpr (T == T_Q5_1) {
            uw.f[1] = h2f((u16)(w[0] >> 16));
            qh = w[1];
#pragma unroll
            for (int k = 0; k < 4; k++) qs[k] = w[2 + k];
        }
        legacy_quant_words<T>(qs, qh, uw.w);
    }
}

// unit_words_decode of the block legacy_words loaded.
template <int T>
__device__ __forceinline__ void unit_load_words(const LegacyWords& r, UnitW& uw) {
    u32 w[9];
    a2_shift<9>(r.x, r.sh, w);
    unit_words_decode<T>(w, uw);
}

// MOLLA_KDEFS=X8 (an experiment): a legacy block as the persistent kernel's packed steps expand
// it in shared memory, so that its row decode is a Q8_0 block's without the 2-byte loads: its 32
// quants as bytes in q (8 words, 16-byte aligned), Q4_0's and Q5_0's less their offset (8, 16;
// then their integer sum needs no s16 correction, and is the same integer), and d, m as f32 in h.
template <int T>
__device__ __forceinline__ void x8_expand(const u32* w, u32* q, float* h) {
    UnitW uw;
    unit_words_decode<T>(w, uw);
    h[0] = uw.f[0];
    h[1] = (T == T_Q4_1 || T == T_Q5_1) ? uw.f[1] : 0.f;
    constexpr u32 off = T == T_Q4_0 ? 0x08080808u : T == T_Q5_0 ? 0x10101010u : 0u;
#pragma unroll
    for (int k = 0; k < 8; k++) q[k] = off ? __vsub4(uw.w[k], off) : uw.w[k];
}

// The contribution of an expanded block (x8_expand: q in shared memory, h its d and m) to the row's
// dot product with unit u's quants xr of input x: unit_legacy's arithmetic on the same integer
// sum (MIN: Q4_1's and Q5_1's minimum term).
template <bool MIN>
__device__ __forceinline__ float unit_x8(const u32* q, const float2 h, const int4* xr, const Xq& x, int u) {
    const uint4 a = ((const uint4*)q)[0], b = ((const uint4*)q)[1];
    const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float r = mul3(h.x, x.dx[u], (float)idot<8>(w, xr));
    if constexpr (MIN) r = __fadd_rn(r, __fmul_rn(h.y, x.sx[u]));
    return r;
}
