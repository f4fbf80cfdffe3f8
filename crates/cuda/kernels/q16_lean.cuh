// Lean Q4_K rows for matvec_wide (session 30; was experiment WIDELEAN: +0.8% tg128 on the real 8B
// file).
// Nsight Compute on the 8B shape's gate/up launch (session 30: 28672 rows of 4096, Q4_K) counts
// 184 instructions a unit a lane in row_dot_q16_one's loop (and 91 a row around it), and the
// launch issuing in 58% of its cycles: the walk is bound by its instructions as much as by its
// loads. A lane takes units lane, lane + 32, ... of a row, so every unit it takes has the same
// pair of sub-blocks j = lane & 3 and the same swizzle of its input slots (unit u's slot k is at
// 8u + (k ^ (u & 7)), and u & 7 = lane & 7). This walk works those out once a row, not once a
// unit:
// - the input's eight 16-byte slots are read at shared address A ^ 16k, A the slot 0 of the unit
//   less its swizzle (when the row's base is 128-byte aligned: one XOR a slot where xq_slot's
//   index arithmetic took about four);
// - the weights' pointer and A step by a constant a unit;
// - the high nibbles are dotted in place, as bytes 16 q (q & 0xf0f0f0f0, unsigned), and the exact
//   sum shifted down by 4 (no shift a word; |sum| < 32768 x 240 x 32 < 2^31);
// - dx and sx of the unit's two blocks are read as pairs.
// The unit's integer sums are the same integers, and its arithmetic and the order of the row's
// sum are apply_k45's and row_dot_q16_one's: the same bits (scripts/cuda_host_check.py checks
// them lane by lane; tests/kernels.rs checks matvec_wide against matvec on the device).

// 16 bytes of a weight row (global memory). (Load hints measured no faster, session 30:
// ld.global.nc with L2::128B or L2::256B or alone level, L1::no_allocate 2% slower.)
__device__ __forceinline__ uint4 ldw16(const u8* p) { return *(const uint4*)p; }

// The 16 bytes at shared-window address a (volatile: kept after the barrier that published them).
__device__ __forceinline__ int4 lds16(u32 a) {
    int4 v;
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

// Where lane `lane`'s walk reads its first unit's input slots: the shared-window address of the
// quantized row's slot 8 lane, with its swizzle bits (lane & 7) in place; `ok`: whether the row
// starts on a 128-byte boundary (else the XOR would carry into the base, and the walk is not
// used).
__device__ __forceinline__ u32 lean_xa(const Xq& x, int lane, bool& ok) {
    const u32 b = smem_u32(x.q);
    ok = (b & 127u) == 0;
    return b + 128u * (u32)lane + 16u * (u32)(lane & 7);
}

// Unit u of a Q4_K row from its bytes (header h, quants qa, qb of sub-block pair j = u & 3), its
// input slots at xa (lean_xa's address, stepped to unit u): apply_k45's value, the same bits.
__device__ __forceinline__ float k4_lean_unit(uint4 h, uint4 qa, uint4 qb, u32 xa, const Xq& x, int u, int sl0,
                                              int sl1, bool hi) {
    int4 xr[8];
#pragma unroll
    for (int k = 0; k < 8; k++) xr[k] = lds16(xa ^ (16u * (u32)k));
    const u32 q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    u32 lo[8], hn[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        lo[k] = q[k] & 0x0f0f0f0fu;
        hn[k] = q[k] & 0xf0f0f0f0u;
    }
    int sc[2], mn[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int sl = e ? sl1 : sl0;
        u32 y = h.y >> sl, z = h.z >> sl, ww = h.w >> sl;
        int lo_sc = (int)(y & 63), lo_mn = (int)(z & 63);
        int hi_sc = (int)((ww & 15) | (((y >> 6) & 3) << 4));
        int hi_mn = (int)(((ww >> 4) & 15) | (((z >> 6) & 3) << 4));
        sc[e] = hi ? hi_sc : lo_sc;
        mn[e] = hi ? hi_mn : lo_mn;
    }
    const float d = h2f((u16)(h.x & 0xffff)), dm = h2f((u16)(h.x >> 16));
    const float2 dx = *(const float2*)(x.dx + 2 * u), sx = *(const float2*)(x.sx + 2 * u);
    const int s0 = idot<8>(lo, xr), s1 = idot<8, true>(hn, xr + 4) >> 4;
    float p0 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[0]), dx.x, (float)s0), __fmul_rn(__fmul_rn(dm, (float)mn[0]), sx.x));
    float p1 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[1]), dx.y, (float)s1), __fmul_rn(__fmul_rn(dm, (float)mn[1]), sx.y));
    return __fadd_rn(p0, p1);
}

// row_dot_q16_one<T_Q4_K> of the row at w (global memory), `xa` from lean_xa. A row of more than
// 64 units (the 8B's down projection: seven units a lane, one row a warp) is walked two units a
// lane at a time, both units' bytes asked for before either is computed, the same sum in the
// same order (session 30, on the real 8B file: +0.7% tg128, 447.6 against 444.3 tok/s over three
// rounds; two at a time for every row measured 1-2% slower).
__device__ __forceinline__ float row_dot_k4_lean(const u8* __restrict__ w, const Xq& x, int cols, int lane, u32 xa) {
    const int nu = cols >> 6, j = lane & 3;
    const u8* p = w + 144 * (lane >> 2);
    // 6-bit scales and mins of sub-blocks 2j, 2j + 1 (scale_min_k4): shifts and layout per lane.
    const int sl0 = 8 * ((2 * j) & 3), sl1 = 8 * ((2 * j + 1) & 3);
    const bool hi = j >= 2;
    float acc = 0.f;
    if (nu > 64) {
        for (int u = lane; u < nu; u += 64, p += 2304, xa += 8192u) {
            const bool two = u + 32 < nu;
            const u8* p1 = two ? p + 1152 : p;
            const uint4 h = ldw16(p), qa = ldw16(p + 16 + 32 * j), qb = ldw16(p + 32 + 32 * j);
            const uint4 h1 = ldw16(p1), qa1 = ldw16(p1 + 16 + 32 * j), qb1 = ldw16(p1 + 32 + 32 * j);
            acc = __fadd_rn(acc, k4_lean_unit(h, qa, qb, xa, x, u, sl0, sl1, hi));
            if (two) acc = __fadd_rn(acc, k4_lean_unit(h1, qa1, qb1, xa + 4096u, x, u + 32, sl0, sl1, hi));
        }
        return acc;
    }
    for (int u = lane; u < nu; u += 32, p += 1152, xa += 4096u) {
        const uint4 h = ldw16(p), qa = ldw16(p + 16 + 32 * j), qb = ldw16(p + 32 + 32 * j);
        acc = __fadd_rn(acc, k4_lean_unit(h, qa, qb, xa, x, u, sl0, sl1, hi));
    }
    return acc;
}
