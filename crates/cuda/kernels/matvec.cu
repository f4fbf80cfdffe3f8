// Decode matvec: y = W · x for one activation row, over up to three weight matrices at once
// (q/k/v, gate/up) that share the input, with the input's preparation fused in:
//   mode 0: x as given; mode 1: rmsnorm(x) * norm_w; mode 2: silu(x) * x2 (SwiGLU).
// Each output row is one group of `lanes` lanes (a power of two, up to 32); a group walks its row
// in chunks of 8 weights, four chunks per lane at a time.

struct MvSeg {
    const u8* w;        // rows * row_bytes, GGUF block layout
    const float* bias;  // rows, or null
    float* y;           // rows
    int rows;
    int row_bytes;
    int ty;
    int accumulate;  // y += W·x instead of y = W·x
};

struct MvArgs {
    MvSeg seg[3];
    int nseg;
    int cols;
    const float* x;
    const float* x2;
    const float* norm_w;
    float eps;
    int mode;
    int lanes;
};

__device__ __forceinline__ float dot8(const float* v, const float* xs) {
    const float4* xp = (const float4*)xs;
    float4 a = xp[0], b = xp[1];
    return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
}

// Four chunks per lane per round, their loads issued together: decode matvecs are latency-bound,
// so the number of dependent rounds matters more than the last round's idle lanes.
template <int T>
__device__ __forceinline__ float row_dot(const u8* __restrict__ w, const float* xs, int nch, int lane, int lanes) {
    float acc = 0.f;
    for (int c0 = lane; c0 < nch; c0 += 4 * lanes) {
        float v[4][8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int c = c0 + u * lanes;
            if (c < nch) dq8<T>(w, c, v[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int c = c0 + u * lanes;
            if (c < nch) acc += dot8(v[u], xs + 8 * c);
        }
    }
    return acc;
}

// K-quant rows walked in units of 32 weights whose quants are contiguous in the block, so a lane
// issues wide loads and decodes the sub-block scales once per unit rather than once per 8 weights.
// Four units per lane per round, loads first, as in row_dot.

// A 4-bit (or 5-bit) value as a float without I2F: 2^23 + v, less 2^23 (exact).
__device__ __forceinline__ float u2f_small(u32 v) { return __uint_as_float(v | 0x4B000000u) - 8388608.f; }

// Q4_K / Q5_K unit u: super-block u >> 3, pair j = (u >> 1) & 3 of sub-blocks (2j, 2j+1), half
// h = u & 1: 16 quant bytes whose low nibbles are elements 64j + 16h + i of sub-block 2j and high
// nibbles elements 64j + 32 + 16h + i of sub-block 2j+1.
template <int T>
__device__ __forceinline__ float row_dot_k45(const u8* __restrict__ w, const float* xs, int nu, int lane, int lanes) {
    constexpr int BYTES = T == T_Q4_K ? 144 : 176;
    constexpr int QS = T == T_Q4_K ? 16 : 48;
    float acc = 0.f;
    for (int u0 = lane; u0 < nu; u0 += 4 * lanes) {
        uint4 hd[4], qv[4], hv[4];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            int u = u0 + t * lanes;
            if (u < nu) {
                const u8* b = w + (size_t)(u >> 3) * BYTES;
                hd[t] = *(const uint4*)b;
                qv[t] = *(const uint4*)(b + QS + 16 * (u & 7));
                if constexpr (T == T_Q5_K) hv[t] = *(const uint4*)(b + 16 + 16 * (u & 1));
            }
        }
#pragma unroll
        for (int t = 0; t < 4; t++) {
            int u = u0 + t * lanes;
            if (u >= nu) continue;
            int j = (u >> 1) & 3;
            uint4 h = hd[t];
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
            float d0 = d * (float)sc[0], m0 = dm * (float)mn[0];
            float d1 = d * (float)sc[1], m1 = dm * (float)mn[1];
            // Rotate the four words by j so the lanes of a quarter-warp read distinct shared banks.
            u32 q[4] = {qv[t].x, qv[t].y, qv[t].z, qv[t].w};
            u32 qh[4] = {0, 0, 0, 0};
            if constexpr (T == T_Q5_K) {
                qh[0] = hv[t].x >> (2 * j); qh[1] = hv[t].y >> (2 * j);
                qh[2] = hv[t].z >> (2 * j); qh[3] = hv[t].w >> (2 * j);
            }
            if (j & 1) {
                u32 tq = q[0]; q[0] = q[1]; q[1] = q[2]; q[2] = q[3]; q[3] = tq;
                u32 th = qh[0]; qh[0] = qh[1]; qh[1] = qh[2]; qh[2] = qh[3]; qh[3] = th;
            }
            if (j & 2) {
                u32 tq = q[0]; q[0] = q[2]; q[2] = tq; tq = q[1]; q[1] = q[3]; q[3] = tq;
                u32 th = qh[0]; qh[0] = qh[2]; qh[2] = th; th = qh[1]; qh[1] = qh[3]; qh[3] = th;
            }
            const float* x = xs + 256 * (u >> 3) + 64 * j + 16 * (u & 1);
            float sq0 = 0.f, sx0 = 0.f, sq1 = 0.f, sx1 = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int o = 4 * ((k + j) & 3);
                float4 xa = *(const float4*)(x + o), xb = *(const float4*)(x + 32 + o);
                u32 lo = q[k] & 0x0f0f0f0fu, hi = (q[k] >> 4) & 0x0f0f0f0fu;
                if constexpr (T == T_Q5_K) {
                    lo |= (qh[k] << 4) & 0x10101010u;
                    hi |= (qh[k] << 3) & 0x10101010u;
                }
                sq0 += u2f_small(lo & 0xff) * xa.x + u2f_small((lo >> 8) & 0xff) * xa.y +
                       u2f_small((lo >> 16) & 0xff) * xa.z + u2f_small(lo >> 24) * xa.w;
                sq1 += u2f_small(hi & 0xff) * xb.x + u2f_small((hi >> 8) & 0xff) * xb.y +
                       u2f_small((hi >> 16) & 0xff) * xb.z + u2f_small(hi >> 24) * xb.w;
                sx0 += (xa.x + xa.y) + (xa.z + xa.w);
                sx1 += (xb.x + xb.y) + (xb.z + xb.w);
            }
            acc += (d0 * sq0 - m0 * sx0) + (d1 * sq1 - m1 * sx1);
        }
    }
    return acc;
}

// Q6_K unit u: super-block u >> 3, half n = (u >> 2) & 1, l0 = 8 * (u & 3): elements
// 128n + 32G + l0 + i (G = 0..3, i = 0..8) from ql[64n + l0 + i] / ql[64n + 32 + l0 + i] (low
// then high nibbles) and qh[32n + l0 + i] (bits 2G). The block is only 2-byte aligned.
__device__ __forceinline__ float row_dot_q6k(const u8* __restrict__ w, const float* xs, int nu, int lane, int lanes) {
    float acc = 0.f;
    for (int u0 = lane; u0 < nu; u0 += 4 * lanes) {
        u32 a0[4], a1[4], b0[4], b1[4], h0[4], h1[4];
        int s[4][4];
        float d[4];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            int u = u0 + t * lanes;
            if (u < nu) {
                const u8* b = w + (size_t)(u >> 3) * 210;
                int n = (u >> 2) & 1, l0 = 8 * (u & 3);
                ld8a2(b + 64 * n + l0, a0[t], a1[t]);
                ld8a2(b + 64 * n + 32 + l0, b0[t], b1[t]);
                ld8a2(b + 128 + 32 * n + l0, h0[t], h1[t]);
                const u8* S = b + 192 + 8 * n + (l0 >> 4);
#pragma unroll
                for (int G = 0; G < 4; G++) s[t][G] = (int)(i8)S[2 * G];
                d[t] = h2f(ld16(b + 208));
            }
        }
#pragma unroll
        for (int t = 0; t < 4; t++) {
            int u = u0 + t * lanes;
            if (u >= nu) continue;
            int n = (u >> 2) & 1, l0 = 8 * (u & 3);
            const float* x = xs + 256 * (u >> 3) + 128 * n + l0;
            float part = 0.f;
#pragma unroll
            for (int G = 0; G < 4; G++) {
                float sg = 0.f;
#pragma unroll
                for (int hw = 0; hw < 2; hw++) {
                    u32 ql = (G & 1) ? (hw ? b1[t] : b0[t]) : (hw ? a1[t] : a0[t]);
                    u32 qh = hw ? h1[t] : h0[t];
                    u32 q = ((ql >> (4 * (G >> 1))) & 0x0f0f0f0fu) | (((qh >> (2 * G)) & 0x03030303u) << 4);
                    float4 xv = *(const float4*)(x + 32 * G + 4 * hw);
                    sg += (u2f_small(q & 0xff) - 32.f) * xv.x + (u2f_small((q >> 8) & 0xff) - 32.f) * xv.y +
                          (u2f_small((q >> 16) & 0xff) - 32.f) * xv.z + (u2f_small(q >> 24) - 32.f) * xv.w;
                }
                part += (float)s[t][G] * sg;
            }
            acc += d[t] * part;
        }
    }
    return acc;
}

// One row's dot product with the prepared input, by weight type. KQ: Q4_K / Q5_K / Q6_K rows
// take the unit paths above (more registers; see matvec_k).
template <bool KQ>
__device__ __forceinline__ float row_dot_ty(int ty, const u8* __restrict__ w, const float* xs, int cols, int lane, int lanes) {
    int nch = cols >> 3;
    switch (ty) {
        case T_F32: return row_dot<T_F32>(w, xs, nch, lane, lanes);
        case T_F16: return row_dot<T_F16>(w, xs, nch, lane, lanes);
        case T_BF16: return row_dot<T_BF16>(w, xs, nch, lane, lanes);
        case T_Q4_0: return row_dot<T_Q4_0>(w, xs, nch, lane, lanes);
        case T_Q4_1: return row_dot<T_Q4_1>(w, xs, nch, lane, lanes);
        case T_Q5_0: return row_dot<T_Q5_0>(w, xs, nch, lane, lanes);
        case T_Q5_1: return row_dot<T_Q5_1>(w, xs, nch, lane, lanes);
        case T_Q8_0: return row_dot<T_Q8_0>(w, xs, nch, lane, lanes);
        case T_Q2_K: return row_dot<T_Q2_K>(w, xs, nch, lane, lanes);
        case T_Q3_K: return row_dot<T_Q3_K>(w, xs, nch, lane, lanes);
        case T_Q4_K: return KQ ? row_dot_k45<T_Q4_K>(w, xs, nch >> 2, lane, lanes) : row_dot<T_Q4_K>(w, xs, nch, lane, lanes);
        case T_Q5_K: return KQ ? row_dot_k45<T_Q5_K>(w, xs, nch >> 2, lane, lanes) : row_dot<T_Q5_K>(w, xs, nch, lane, lanes);
        case T_Q6_K: return KQ ? row_dot_q6k(w, xs, nch >> 2, lane, lanes) : row_dot<T_Q6_K>(w, xs, nch, lane, lanes);
        default: return __int_as_float(0x7fc00000);
    }
}

// 1 / sqrt(mean(x^2) + eps) of x[0..n), summed in f64 by the block's first `nt` threads (a multiple
// of 32, at most blockDim.x) in a fixed order, so any kernel that calls it with the same `nt` gets
// the same bits. Every thread of the block must call it.
__device__ float rms_scale(const float* x, int n, float eps, int nt) {
    __shared__ double red[32];
    double ss = 0.0;
    if ((int)threadIdx.x < nt)
        for (int i = threadIdx.x; i < n; i += nt) {
            double v = x[i];
            ss += v * v;
        }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < (nt >> 5); i++) t += red[i];
        red[0] = t;
    }
    __syncthreads();
    float scale = (float)(1.0 / sqrt(red[0] / n + (double)eps));
    __syncthreads();  // red is reused by the next call
    return scale;
}

// silu(g) * u, as every SwiGLU in the CUDA backend computes it.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// Prepares the input row in shared memory (all threads of the block take part).
__device__ void load_input(const MvArgs& a, float* xs) {
    int n = a.cols;
    if (a.mode == 1) {
        float scale = rms_scale(a.x, n, a.eps, blockDim.x);
        for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = a.x[i] * scale * a.norm_w[i];
    } else if (a.mode == 2) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = silu_mul(a.x[i], a.x2[i]);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = a.x[i];
    }
    __syncthreads();
}

// KQ: Q4_K / Q5_K / Q6_K rows take the unit paths above. Those need more registers, so they get a
// kernel of their own (matvec_k, launched when a segment is one of them) and the other types keep
// the occupancy of the plain one.
template <bool KQ>
__device__ __forceinline__ void matvec_body(const MvArgs& a) {
    extern __shared__ float4 smem4[];
    float* xs = (float*)smem4;
    load_input(a, xs);
    int lanes = a.lanes;
    int lane = threadIdx.x & (lanes - 1);
    int groups = blockDim.x / lanes;
    int total = 0;
    for (int i = 0; i < a.nseg; i++) total += a.seg[i].rows;
    // The grid may be smaller than the row count (the input is prepared once per block): blocks
    // stride over rows. `rb` is uniform across the block, so whole warps take the same trips.
    for (int rb = blockIdx.x * groups; rb < total; rb += gridDim.x * groups) {
        int r = rb + threadIdx.x / lanes;
        int si = 0;
        while (si < a.nseg && r >= a.seg[si].rows) {
            r -= a.seg[si].rows;
            si++;
        }
        bool active = si < a.nseg;
        float acc = 0.f;
        if (active) {
            const MvSeg& s = a.seg[si];
            const u8* w = s.w + (size_t)r * s.row_bytes;
            acc = row_dot_ty<KQ>(s.ty, w, xs, a.cols, lane, lanes);
        }
        __syncwarp();
        acc = group_sum(acc, lanes);
        if (active && lane == 0) {
            const MvSeg& s = a.seg[si];
            float v = acc;
            if (s.bias) v += s.bias[r];
            if (s.accumulate) v += s.y[r];
            s.y[r] = v;
        }
    }
}

extern "C" __global__ void matvec(const MvArgs a) { matvec_body<false>(a); }
extern "C" __global__ void matvec_k(const MvArgs a) { matvec_body<true>(a); }
