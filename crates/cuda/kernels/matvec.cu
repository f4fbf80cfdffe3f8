// Decode matvec: y = W · x for one activation row, over up to three weight matrices at once
// (q/k/v, gate/up) that share the input, with the input's preparation fused in:
//   mode 0: x as given; mode 1: rmsnorm(x) * norm_w; mode 2: silu(x) * x2 (SwiGLU); mode 4:
//   gelu_tanh(x) * x2 (GeGLU: gemma).
// Each output row is one group of `lanes` lanes (a power of two, up to 32). Quantized rows of the
// formats in q16.cuh are dotted with the input quantized to 16 bits (shared memory after the f32
// row); the others walk the f32 row in chunks of 8 weights, four chunks per lane at a time.

struct MvSeg {
    const u8* w;        // rows * row_bytes, GGUF block layout
    const float* bias;  // rows, or null
    float* y;           // rows
    int rows;
    int row_bytes;
    int ty;
    int accumulate;  // 1: y += W·x instead of y = W·x; 2: the same with the row summed in fixed
                     // point (q16.cuh fx_of; legacy q16 formats, one segment, no bias)
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

// One row's dot product with the prepared input, by weight type: the formats q16.cuh covers
// take the quantized input `xq`, the others the f32 row `xs`.
__device__ __forceinline__ float row_dot_ty(int ty, const u8* __restrict__ w, const float* xs, const Xq& xq, int cols,
                                            int lane, int lanes) {
    int nch = cols >> 3;
    switch (ty) {
        case T_F32: return row_dot<T_F32>(w, xs, nch, lane, lanes);
        case T_F16: return row_dot<T_F16>(w, xs, nch, lane, lanes);
        case T_BF16: return row_dot<T_BF16>(w, xs, nch, lane, lanes);
        case T_Q4_0: return row_dot_q16<T_Q4_0>(w, xq, cols, lane, lanes);
        case T_Q4_1: return row_dot_q16<T_Q4_1>(w, xq, cols, lane, lanes);
        case T_Q5_0: return row_dot_q16<T_Q5_0>(w, xq, cols, lane, lanes);
        case T_Q5_1: return row_dot_q16<T_Q5_1>(w, xq, cols, lane, lanes);
        case T_Q8_0: return row_dot_q16<T_Q8_0>(w, xq, cols, lane, lanes);
        case T_Q2_K: return row_dot<T_Q2_K>(w, xs, nch, lane, lanes);
        case T_Q3_K: return row_dot<T_Q3_K>(w, xs, nch, lane, lanes);
        case T_Q4_K: return row_dot_q16<T_Q4_K>(w, xq, cols, lane, lanes);
        case T_Q5_K: return row_dot_q16<T_Q5_K>(w, xq, cols, lane, lanes);
        case T_Q6_K: return row_dot_q16<T_Q6_K>(w, xq, cols, lane, lanes);
        default: return __int_as_float(0x7fc00000);
    }
}

// Runs CALL(T) and returns when `ty` is a format q16.cuh covers (T its type constant); falls
// through for the others.
// The cases of the legacy q16 formats (a unit is one block of 32): CALL(T), then return.
#define Q16_LEGACY_CASES(CALL)                      \
        case T_Q4_0: CALL(T_Q4_0); return;          \
        case T_Q4_1: CALL(T_Q4_1); return;          \
        case T_Q5_0: CALL(T_Q5_0); return;          \
        case T_Q5_1: CALL(T_Q5_1); return;          \
        case T_Q8_0: CALL(T_Q8_0); return;

#define Q16_DISPATCH(ty, CALL)                      \
    switch (ty) {                                   \
        Q16_LEGACY_CASES(CALL)                      \
        case T_Q4_K: CALL(T_Q4_K); return;          \
        case T_Q5_K: CALL(T_Q5_K); return;          \
        case T_Q6_K: CALL(T_Q6_K); return;          \
        default: break;                             \
    }

// R rows' dot products with the same prepared input (rows w[0 .. nr), nr <= R, all of type ty):
// the q16 formats read each unit's input once for all rows (rows_dot_q16); every row gets the
// bits row_dot_ty gives it.
template <int R>
__device__ __forceinline__ void rows_dot_ty(int ty, const u8* const* w, int nr, const float* xs, const Xq& xq, int cols,
                                            int lane, int lanes, float* acc) {
#define ROWS_Q16(T) rows_dot_q16<T, R>(w, nr, xq, cols, lane, lanes, acc)
    Q16_DISPATCH(ty, ROWS_Q16)
#undef ROWS_Q16
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = r < nr ? row_dot_ty(ty, w[r], xs, xq, cols, lane, lanes) : 0.f;
}

// RMSNorm's sum of squares in f64 in a fixed order, so that every kernel gets the same bits: `nt`
// threads (a multiple of 32), thread v adding x[v], x[v + nt], ..., each warp's sums added over
// lanes (xor shuffles), then the warps' sums in order (rms_total). The block's scale is
// 1 / sqrt(mean(x^2) + eps).
__shared__ double rms_red[32];

// The first half, by the threads [v0, v0 + nt) of the block (v = threadIdx.x - v0; whole warps;
// the other threads return at once): each warp's sum into rms_red. A barrier must follow before
// rms_total, and the block must pass one before the next rms_part (rms_red is reused).
__device__ __forceinline__ void rms_part(const float* x, int n, int v0, int nt) {
    int v = (int)threadIdx.x - v0;
    if (v < 0 || v >= nt) return;
    double ss = 0.0;
    for (int i = v; i < n; i += nt) {
        double e = x[i];
        ss += e * e;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((v & 31) == 0) rms_red[v >> 5] = ss;
}

// The second half, by any thread after the barrier: the warps' sums in order, then the scale.
__device__ __forceinline__ float rms_total(int n, float eps, int nt) {
    double t = 0.0;
    for (int i = 0; i < (nt >> 5); i++) t += rms_red[i];
#ifdef MOLLA_X_DIVSQRT
    // The form before session 58 (MOLLA_KDEFS=DIVSQRT, every program alike): a division, a
    // square root and a division in a row, each an iteration of dependent f64 instructions on
    // the step's critical path.
    return (float)(1.0 / sqrt(t / n + (double)eps));
#else
    // f64 rsqrt (a hardware estimate and Newton steps, 1 ulp) of mean + eps, the mean as a
    // product by 1 / n, which does not wait for the sum. The f32 scale can differ from the
    // correctly rounded one only within an f64 ulp of an f32 rounding boundary. Session 58 (was
    // MOLLA_KDEFS=RSQRT; H100, real files, tg128, two rounds): SmolLM2 Q4_1 2835.6, 2839.8
    // tok/s against 2805.2, 2800.0; Q8_0 2683.0, 2677.7 against 2644.2, 2655.6; Qwen2.5 Q4_K_M
    // 2156.5, 2159.8 against 2138.4, 2140.1 (+0.9-1.2%; level in session 19, on steps twice as
    // long).
    return (float)rsqrt(fma(t, 1.0 / n, (double)eps));
#endif
}

// The scale of x[0..n) summed by the block's first `nt` threads (at most blockDim.x). Every
// thread of the block must call it. No final barrier: the block must pass one before it calls
// again (rms_red is reused); rms_scale adds it.
__device__ __forceinline__ float rms_scale_unsynced(const float* x, int n, float eps, int nt) {
    rms_part(x, n, 0, nt);
    __syncthreads();
    return rms_total(n, eps, nt);
}

__device__ float rms_scale(const float* x, int n, float eps, int nt) {
    float scale = rms_scale_unsynced(x, n, eps, nt);
    __syncthreads();  // red is reused by the next call
    return scale;
}

// silu(g) * u, as every SwiGLU in the CUDA backend computes it.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// gelu_tanh(g) * u (gemma's GeGLU), as the CPU's geglu writes it: g * sigmoid(2 sqrt(2/pi)
// (g + 0.044715 g^3)), the sigmoid's exponent (g * -2 sqrt(2/pi)) * (1 + 0.044715 g^2).
__device__ __forceinline__ float gelu_mul(float g, float u) {
    return g / (1.0f + expf(__fmul_rn(g, -1.5957692f) * fmaf(0.044715f, __fmul_rn(g, g), 1.0f))) * u;
}

// A gated unit's product for matvec mode 2 (SwiGLU) or 4 (GeGLU).
__device__ __forceinline__ float glu_mul(int mode, float g, float u) { return mode == 4 ? gelu_mul(g, u) : silu_mul(g, u); }

// dst[0..n) = src[0..n) through L2 (src was written by other blocks), by all threads of the block,
// 16-byte loads U at a time when src is 16-byte aligned; no barrier.
template <int U = 4>
__device__ void load_row(const float* src, float* dst, int n) {
    int T = blockDim.x;
    if (((size_t)src & 15) == 0 && (n & 3) == 0) {
        const float4* s4 = (const float4*)src;
        float4* d4 = (float4*)dst;
        int n4 = n >> 2;
        for (int i = threadIdx.x; i < n4; i += U * T) {
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i + u * T < n4) v[u] = __ldcg(s4 + i + u * T);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i + u * T < n4) d4[i + u * T] = v[u];
        }
    } else {
        for (int i = threadIdx.x; i < n; i += T) dst[i] = __ldcg(src + i);
    }
}

// w[0..8) = p[0..8): two 16-byte loads when p is 16-byte aligned (the wide kernels' RMSNorm
// weights, loaded before their PDL wait).
__device__ __forceinline__ void load8(const float* p, float* w) {
    if (((size_t)p & 15) == 0) {
        const float4 wa = ((const float4*)p)[0], wb = ((const float4*)p)[1];
        w[0] = wa.x, w[1] = wa.y, w[2] = wa.z, w[3] = wa.w, w[4] = wb.x, w[5] = wb.y, w[6] = wb.z, w[7] = wb.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = p[j];
    }
}

// Where a prepared row (f32 row, then its q16 quantization) keeps its RMSNorm scale: after both.
__host__ __device__ __forceinline__ int prep_scale_off(int cols) { return cols * 4 + xq_bytes(cols); }

// The factor of every output row of the input load_input prepared (mv_scaled): RMSNorm's scale,
// which the prepared row leaves out (x * w, not x * scale * w, so that the quantization need not
// wait for the row's sum; the persistent kernel sums while it quantizes), else 1.
__shared__ float mv_scale;

// Prepares input row t (of a batch; 0 for one row) in shared memory (all threads of the block take
// part), then (Q) its q16 quantization at xs + cols (quantize_q16), and sets mv_scale. Without Q
// (fixed-point rows, which read the f32 row itself) the row alone, followed by a barrier.
template <bool Q = true>
__device__ void load_input(const MvArgs& a, float* xs, int t) {
    int n = a.cols;
    const float* x = a.x + (size_t)t * n;
    float scale = 1.f;
    if (a.mode == 1) {
        load_row(x, xs, n);
        __syncthreads();
        scale = rms_scale(xs, n, a.eps, blockDim.x);
        // The norm weights loaded eight a thread before the products are stored (a plain loop's
        // SASS waited for each load: five round trips for 576 values at 128 threads). Session 53
        // (was MOLLA_KDEFS=NORMW8), H100: SmolLM2 Q4_1 tg128 at d1024 (the graph path past the
        // persistent kernel's 768 positions) 1021.3, 1021.9 tok/s against 948.6, 948.1;
        // batch_speed at 16 / 64 sequences +2.5% / +1.1%. The same products: the same bits.
        for (int i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) {
            float w[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * blockDim.x;
                w[u] = i < n ? __ldg(a.norm_w + i) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * blockDim.x;
                if (i < n) xs[i] = __fmul_rn(xs[i], w[u]);
            }
        }
    } else if (a.mode == 2 || a.mode == 4) {
        const float* x2 = a.x2 + (size_t)t * n;
        // The gate and up values loaded eight a thread before the products, as the norm weights
        // above (a plain loop waited for each pair of loads: twelve round trips for SmolLM2's
        // 1536 values at 128 threads). Session 54 (was MOLLA_KDEFS=GLU8), H200: tg128 at d768
        // (then on the graph path) SmolLM2 Q4_1 1104.8, 1105.1 tok/s against 1041.7, 1040.7, Qwen2.5
        // Q4_K_M 898.0, 898.4 against 810.0, 810.4; batch_speed at 16 / 64 sequences +2.6% /
        // +1.1%. The same products: the same bits. (The two loops as one template taking the loads
        // and stores as lambdas: the same arithmetic, but ptxas chose other instructions for
        // matvec_fx, so the measured code is kept as it ran.)
        for (int i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) {
            float g[8], u[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int i = i0 + k * blockDim.x;
                g[k] = i < n ? x[i] : 0.f;
                u[k] = i < n ? x2[i] : 0.f;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int i = i0 + k * blockDim.x;
                if (i < n) xs[i] = glu_mul(a.mode, g[k], u[k]);
            }
        }
    } else {
        load_row(x, xs, n);
    }
    if (threadIdx.x == 0) mv_scale = scale;
    __syncthreads();
    if constexpr (Q) quantize_q16(xs, n, (u8*)(xs + n));
}

// An output row's dot product times its input's RMSNorm scale (1 for other inputs: exact), as
// every decode path rounds it.
__device__ __forceinline__ float mv_scaled(float dot, float scale) { return __fmul_rn(dot, scale); }

// The thread's row in the block's trip starting at row rb: segment si, row r of it; false when
// past the last segment.
__device__ __forceinline__ bool mv_row(const MvArgs& a, int rb, int lanes, int& si, int& r) {
    r = rb + threadIdx.x / lanes;
    si = 0;
    while (si < a.nseg && r >= a.seg[si].rows) {
        r -= a.seg[si].rows;
        si++;
    }
    return si < a.nseg;
}

// Output row r of input row t: the dot product v, plus the bias, plus what y holds (accumulate).
// Returns the value stored.
__device__ __forceinline__ float mv_store(const MvSeg& s, int t, int r, float v) {
    float* y = s.y + (size_t)t * s.rows;
    if (s.bias) v += s.bias[r];
    if (s.accumulate) v += y[r];
    y[r] = v;
    return v;
}

// A thread's running greedy pick over the values it stored, by pick.cu's rule (pick_greedy):
// the highest value, the lowest index among equals (a thread's indices rise, so a strictly
// greater value replaces), -inf masked; and the lowest index of a NaN or +inf.
struct PickAcc {
    float best;
    int bi, bad;
};

__device__ __forceinline__ PickAcc pick_acc() { return PickAcc{-__int_as_float(0x7f800000), 0x7fffffff, 0x7fffffff}; }

__device__ __forceinline__ void pick_add(PickAcc& p, float v, int i) {
    if (v != v || v == __int_as_float(0x7f800000)) p.bad = min(p.bad, i);
    else if (v > p.best) p.best = v, p.bi = i;
}

// A fixed-point row (MvSeg::accumulate 2): y[r] = fx_value(sum) + y[r], as the persistent
// kernel's folded wo gives it (persistent.cu pk_load_acc).
__device__ __forceinline__ void mv_store_fx(const MvSeg& s, int t, int r, FxAcc f) {
    float* y = s.y + (size_t)t * s.rows;
    y[r] = f.bad ? __int_as_float(0x7fc00000) : fx_value(f.s) + y[r];
}

// Whether the launch's rows are fixed-point ones (uniform over the grid: one segment).
__device__ __forceinline__ bool mv_fx(const MvArgs& a) { return a.nseg == 1 && a.seg[0].accumulate == 2; }

// acc = row_dot_f32_fx by weight type (q16_rows.cuh): fixed-point rows on the f32 input x, for
// the legacy q16 formats, which the host alone sets fixed-point rows for (a NaN row, FxAcc::bad,
// for any other).
__device__ __forceinline__ void row_dot_fx_f32_ty(int ty, const u8* __restrict__ w, const float* x, int cols, int lane,
                                                  int lanes, FxAcc& acc) {
    acc = FxAcc{0, 1};
#define FX_F32_ROW(T) acc = row_dot_f32_fx<T>(w, x, cols, lane, lanes)
    switch (ty) {
        Q16_LEGACY_CASES(FX_F32_ROW)
        default: break;
    }
#undef FX_F32_ROW
}

__device__ __forceinline__ int mv_total(const MvArgs& a) {
    int total = 0;
    for (int i = 0; i < a.nseg; i++) total += a.seg[i].rows;
    return total;
}

// The block's row trips over a's rows, `a.lanes` lanes a row: row(si, r, active, lane, lanes) for
// row r of segment si (active: the thread's group has a row). The grid may be smaller than the
// row count (the input is prepared once per block): blocks stride over rows. The trip start is
// uniform across the block, so whole warps take the same trips.
template <class Row>
__device__ __forceinline__ void mv_row_trips(const MvArgs& a, Row row) {
    int lanes = a.lanes;
    int lane = threadIdx.x & (lanes - 1);
    int groups = blockDim.x / lanes, total = mv_total(a);
    for (int rb = blockIdx.x * groups; rb < total; rb += gridDim.x * groups) {
        int si, r;
        bool active = mv_row(a, rb, lanes, si, r);
        row(si, r, active, lane, lanes);
    }
}

// FX: fixed-point rows (MvSeg::accumulate 2), a kernel of their own (matvec_fx), so that the
// f32 kernel keeps its registers (82, against 100 with both paths in one: six blocks an SM,
// not five).
template <bool FX>
__device__ __forceinline__ void matvec_body(const MvArgs& a) {
    extern __shared__ float4 smem4[];
    pdl_trigger();
    pdl_wait();
    float* xs = (float*)smem4;
    // (Fixed-point rows never have an RMSNorm input: the scale is 1 for them; they read the f32
    // row, so it is not quantized.)
    load_input<!FX>(a, xs, 0);
    const Xq xq = xq_at((u8*)(xs + a.cols), a.cols);
    mv_row_trips(a, [&](int si, int r, bool active, int lane, int lanes) {
        if (FX) {
            const MvSeg& s = a.seg[0];
            FxAcc f{};
            if (active) row_dot_fx_f32_ty(s.ty, s.w + (size_t)r * s.row_bytes, xs, a.cols, lane, lanes, f);
            __syncwarp();
            f = group_sum(f, lanes);
            if (active && lane == 0) mv_store_fx(s, 0, r, f);
            return;
        }
        float acc = 0.f;
        if (active) {
            const MvSeg& s = a.seg[si];
            acc = row_dot_ty(s.ty, s.w + (size_t)r * s.row_bytes, xs, xq, a.cols, lane, lanes);
        }
        __syncwarp();
        acc = group_sum(acc, lanes);
        if (active && lane == 0) mv_store(a.seg[si], 0, r, mv_scaled(acc, mv_scale));
    });
}

MOLLA_KERNEL void matvec(const MvArgs a) {
    KTRACE(2);
    matvec_body<false>(a);
}

MOLLA_KERNEL void matvec_fx(const MvArgs a) {
    KTRACE(3);
    matvec_body<true>(a);
}

// acc = row_dot_q16_one by weight type (q16 formats only, as the host checks; NaN for any other).
__device__ __forceinline__ void row_dot_one_ty(int ty, const u8* __restrict__ w, const Xq& xq, int cols, int lane,
                                               float& acc) {
    acc = __int_as_float(0x7fc00000);
#define ONE_Q16(T) acc = row_dot_q16_one<T>(w, xq, cols, lane)
    Q16_DISPATCH(ty, ONE_Q16)
#undef ONE_Q16
}

// Value i of a row held as the persistent kernel's tagged words (8 bytes a value, the value in
// the low half), through L2 (other blocks wrote it).
__device__ __forceinline__ float tagged_value(const float* x, int i) { return __uint_as_float((u32)__ldcg((const u64*)x + i)); }

// matvec_wide's input, prepared in parallel: block b takes values [1024 b, 1024 b + 1024) of the
// row (four threads a block of 32), prepared as load_input prepares them (RMSNorm: x * w; block 0
// sums the whole row with 128 threads, so the scale has load_input's bits, and stores it at
// prep_scale_off) and quantized as quantize_q16 quantizes them, into prep + cols * 4 (the f32 row
// before it is not written).
// Mode 3, for this kernel only: RMSNorm as mode 1 over the persistent kernel's tagged words (the
// value in each word's low half), for a head that runs after that kernel.
MOLLA_KERNEL void __launch_bounds__(128) matvec_prep_wide(const MvArgs a, u8* prep) {
    KTRACE(4);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    float* xs = (float*)smem4;
    int n = a.cols;
    int b0 = blockIdx.x * 32 + (threadIdx.x >> 2), part = threadIdx.x & 3;
    bool live = b0 < (n >> 5);
    int b = live ? b0 : 0;
    // The norm weights first: they depend on no kernel before, and their loads then overlap the
    // row's instead of following the sum.
    float w[8];
    if (a.mode == 1 || a.mode == 3) load8(a.norm_w + 32 * b + 8 * part, w);
    pdl_wait();
    // The persistent kernel's tagged words (mode 3): the value in the low half of each.
    auto at = [&](int i) { return a.mode == 3 ? tagged_value(a.x, i) : __ldcg(a.x + i); };
    // Block 0 sums the row for the scale (as load_input: 128 threads) and stores it after the
    // quantized row, where matvec_wide reads it; the other blocks need not wait for the sum.
    float scale = 1.f;
    const bool norm = a.mode == 1 || a.mode == 3, sums = norm && blockIdx.x == 0;
    if (sums) {
        // Eight 16-byte loads in flight a thread, so that the 8B's 4096-value row comes in one
        // round trip, not two (this block is the launch's longest: the others load 8 values a
        // thread). Session 50, H100, real 8B file: 388.0-388.1 tok/s against 386.4 with four
        // (load_row's default; a loop of single loads into shared memory waits for each one).
        if (a.mode == 3) {
#pragma unroll 8
            for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = at(i);
        } else {
            load_row<8>(a.x, xs, n);
        }
        __syncthreads();
        scale = rms_scale(xs, n, a.eps, blockDim.x);
    }
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int i = 32 * b + 8 * part + j;
        // The scale left out; block 0 has the row in shared memory already.
        if (norm) v[j] = __fmul_rn(sums ? xs[i] : at(i), w[j]);
        else if (a.mode == 2 || a.mode == 4) v[j] = glu_mul(a.mode, a.x[i], a.x2[i]);
        else v[j] = at(i);
    }
    q16_block(v, b, part, live, n, prep + (size_t)n * 4);
    if (blockIdx.x == 0 && threadIdx.x == 0) *(float*)(prep + prep_scale_off(n)) = scale;
}

// The RMSNorm scale of a row matvec_prep_wide prepared at `prep` (1 for other inputs, and for
// rows another kernel quantized: Prep::Ready).
__device__ __forceinline__ float prep_scale(const MvArgs& a, const u8* prep) {
    return a.mode == 1 || a.mode == 3 ? __ldcg((const float*)(prep + prep_scale_off(a.cols))) : 1.f;
}

// The q16 row matvec_prep_wide prepared at `prep`, copied by the block into shared memory at
// `dst` (followed by a barrier): every 16-byte piece a cp.async, all in flight at once, then one
// wait. (Session 51: a loop of loads and stores waited for each load before the next, its SASS
// LDG, STS, branch, so the 8B's down block copied its 35 KiB row in nine round trips to L2 and a
// 4096-value row in three; the real 8B file, H100, tg128: 407.6-407.8 tok/s against 393.7-393.9.)
__device__ __forceinline__ Xq prep_xq(const MvArgs& a, const u8* prep, float4* dst) {
    const int4* src = (const int4*)(prep + (size_t)a.cols * 4);
    for (int i = threadIdx.x; i < (xq_bytes(a.cols) >> 4); i += blockDim.x) cp_async16(smem_u32(dst + i), src + i);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    return xq_at((u8*)dst, a.cols);
}

// Row r of segment s dotted with the prepared input xq (in shared memory) into acc, as the wide
// kernels walk it: Q4_K rows on the lean walk when lean_xa allowed it (`lean`, `xa`: the lane's
// lean_xa), every other row on row_dot_one_ty. The same bits either way.
__device__ __forceinline__ void wide_row_dot(const MvSeg& s, int r, const Xq& xq, int cols, int lane, bool lean, u32 xa,
                                             float& acc) {
    const u8* row = s.w + (size_t)r * s.row_bytes;
    if (lean && s.ty == T_Q4_K) acc = row_dot_k4_lean(row, xq, cols, lane, xa);
    else row_dot_one_ty(s.ty, row, xq, cols, lane, acc);
}

// matvec_wide's rows on the prepared input xq (in shared memory) whose RMSNorm scale is `scale`:
// a warp a row, 32 lanes, the block's warps striding over the grid's rows. With PICK (one plain
// segment: matvec_wide_pick), lane 0 of each warp keeps the greedy pick of the rows it stored in
// `pick`.
// Q4_K rows are walked by row_dot_k4_lean (q16_lean.cuh), which works a lane's per-unit constants
// out once a row: the same bits, 138 instructions a unit instead of 184 (session 30: +0.8% tg128
// on the real 8B file, 446-447 against 443-444 tok/s, three rounds).
template <bool PICK = false>
__device__ __forceinline__ void wide_rows(const MvArgs& a, const Xq& xq, float scale, PickAcc* pick = nullptr) {
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, total = mv_total(a);
    const bool fx = mv_fx(a);
    bool lean;
    const u32 xa = lean_xa(xq, lane, lean);
    for (int rb = blockIdx.x * warps; rb < total; rb += gridDim.x * warps) {
        int si, r;
        bool active = mv_row(a, rb, 32, si, r);
        if (fx) {
            const MvSeg& s = a.seg[0];
            FxAcc f{};
            // The f32 input from the caller's row (a plain input: fixed-point rows have no other).
            if (active) row_dot_fx_f32_ty(s.ty, s.w + (size_t)r * s.row_bytes, a.x, a.cols, lane, 32, f);
            f = group_sum(f, 32);
            if (active && lane == 0) mv_store_fx(s, 0, r, f);
            continue;
        }
        float acc = 0.f;
        if (active) {
            const MvSeg& s = a.seg[si];
            wide_row_dot(s, r, xq, a.cols, lane, lean, xa, acc);
        }
        acc = warp_sum(acc);
        if (active && lane == 0) {
            float v = mv_store(a.seg[si], 0, r, mv_scaled(acc, scale));
            if constexpr (PICK) pick_add(*pick, v, r);
        }
    }
}

// acc0, acc1 = row_dot_q16_two by weight type, for the legacy q16 formats only (the head's walk:
// no K-quant pair walk is compiled into it); NaN for any other.
__device__ __forceinline__ void row_dot_two_ty(int ty, const u8* __restrict__ w0, const u8* __restrict__ w1,
                                               const Xq& xq, int cols, int lane, float& a0, float& a1) {
    a0 = a1 = __int_as_float(0x7fc00000);
#define TWO_Q16(T) row_dot_q16_two<T>(w0, w1, xq, cols, lane, a0, a1)
    switch (ty) {
        Q16_LEGACY_CASES(TWO_Q16)
        default: break;
    }
#undef TWO_Q16
}

// wide_rows for one plain segment (no bias, no accumulation: a head) whose output is mapped host
// memory: warp g of the grid takes a run of consecutive rows [g n, g n + n) (n = rows / warps,
// rounded up) instead of every warps-th row, keeps the value of each 32 consecutive rows on
// their lanes, and stores them in one coalesced 128-byte write across PCIe, where wide_rows'
// lane 0 stores each row's 4 bytes alone (a transfer each). The same rows, arithmetic and sums:
// the same bits. (Every lane holds the row's sum: warp_sum's butterfly gives them all the same
// bits.)
__device__ __forceinline__ void wide_rows_host(const MvArgs& a, const Xq& xq, float scale) {
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int g = blockIdx.x * warps + (threadIdx.x >> 5), nw = gridDim.x * warps;
    const MvSeg& s = a.seg[0];
    const int n = (s.rows + nw - 1) / nw, r0 = g * n, r1 = min(s.rows, r0 + n);
    float mine = 0.f;
    if (s.ty != T_Q4_K && s.ty != T_Q5_K && s.ty != T_Q6_K) {
        // The legacy formats two rows at a time (row_dot_q16_two; a last odd row is dotted
        // twice and its copy dropped). A pair lies in one run of 32 (runs start at r0, pairs at
        // r0 + 2k).
        for (int r = r0; r < r1; r += 2) {
            const u8* w0 = s.w + (size_t)r * s.row_bytes;
            const u8* w1 = r + 1 < r1 ? w0 + s.row_bytes : w0;
            float a0, a1;
            row_dot_two_ty(s.ty, w0, w1, xq, a.cols, lane, a0, a1);
            a0 = mv_scaled(warp_sum(a0), scale);
            a1 = mv_scaled(warp_sum(a1), scale);
            const int k = (r - r0) & 31;
            if (k == lane) mine = a0;
            if (k + 1 == lane) mine = a1;
            if (k + 2 >= 32 || r + 2 >= r1) {
                const int base = r - k, last = min(r + 1, r1 - 1) - base;
                if (lane <= last) s.y[base + lane] = mine;
            }
        }
        return;
    }
    bool lean;
    const u32 xa = lean_xa(xq, lane, lean);
    for (int r = r0; r < r1; r++) {
        float acc = 0.f;
        wide_row_dot(s, r, xq, a.cols, lane, lean, xa, acc);
        acc = mv_scaled(warp_sum(acc), scale);
        const int k = (r - r0) & 31;
        if (k == lane) mine = acc;
        if (k == 31 || r == r1 - 1) {
            const int base = r - k;
            if (lane <= k) s.y[base + lane] = mine;
        }
    }
}

// Decode matvec for big matrices, on an input `matvec_prep_wide` prepared once (prep: room for the
// f32 row, then its q16 quantization): each block copies only the quantized row into shared memory, a warp
// takes a row (lanes 32: the bits `matvec` gives), one unit a lane at a time in few registers so
// that four blocks share an SM and their weight loads keep HBM busy (`matvec` prepares the input
// in every block and holds two to six blocks an SM: 1.3 TB/s on the 8B's gate/up rows, this
// 3.0 TB/s; scripts/mvbench).
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide(const MvArgs a, const u8* prep) {
    KTRACE(5);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    // No L2 prefetch of the first rows before the wait: measured 5% slower under PDL (session 25).
    pdl_wait();
    wide_rows(a, prep_xq(a, prep, smem4), prep_scale(a, prep));
}

#ifdef MOLLA_X_WIDEPREP
// A matvec_wide-shaped block's RMSNorm input (mode 1) prepared by the block itself into shared
// memory at smem4 (cols floats, then the q16 row), so that no matvec_prep_wide launch comes
// before: the block loads the row, its threads quantize x * w into the q16 row after it (the norm
// weights of up to two trips loaded before the PDL wait: they depend on no kernel), and threads
// [128, 256) sum the squares in the order of matvec_prep_wide's block 0 (128 threads). The same
// bits as matvec_prep_wide. Returns the q16 row and sets `scale`; calls pdl_wait.
__device__ __forceinline__ Xq wide_prep_block(const MvArgs& a, float4* smem4, float& scale) {
    float* xs = (float*)smem4;
    u8* xqb = (u8*)(xs + a.cols);
    const int n = a.cols, nb = n >> 5, part = threadIdx.x & 3, per = blockDim.x >> 2;
    const int trips = (nb + per - 1) / per;
    // Values 8 part .. 8 part + 8 of the q16 block trip `it` gives this thread (block 0 past the
    // row's end: computed, not stored).
    auto at = [&](int it, bool& live) {
        const int b0 = it * per + (threadIdx.x >> 2);
        live = b0 < nb;
        return 32 * (live ? b0 : 0) + 8 * part;
    };
    float w0[8], w1[8];
    bool live;
    if (trips <= 2) {
        load8(a.norm_w + at(0, live), w0);
        if (trips == 2) load8(a.norm_w + at(1, live), w1);
    }
    pdl_wait();
    load_row<8>(a.x, xs, n);
    __syncthreads();
    rms_part(xs, n, 128, 128);
    auto trip = [&](int it, const float* w) {
        const int i = at(it, live);
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fmul_rn(xs[i + j], w[j]);
        q16_block(v, i >> 5, part, live, n, xqb);
    };
    if (trips <= 2) {
        trip(0, w0);
        if (trips == 2) trip(1, w1);
    } else {
        for (int it = 0; it < trips; it++) {
            float w[8];
            load8(a.norm_w + at(it, live), w);
            trip(it, w);
        }
    }
    __syncthreads();
    scale = rms_total(n, a.eps, 128);
    return xq_at(xqb, n);
}

// MOLLA_KDEFS=WIDEPREP (an experiment, session 50; session 21's matvec_wide_norm, measured
// slower then, while consecutive launches still asked SMs for different shared-memory splits;
// sessions 51-54 level or slower): matvec_wide on an RMSNorm input (mode 1) that every block
// prepares itself (wide_prep_block). The same bits as matvec_prep_wide + matvec_wide. Shared
// memory: cols floats, then xq_bytes(cols).
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide_norm(const MvArgs a) {
    KTRACE(6);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    float scale;
    const Xq xq = wide_prep_block(a, smem4, scale);
    wide_rows(a, xq, scale);
}
#endif

// matvec_wide of a head (one plain segment) into mapped host memory, its rows in coalesced runs
// (wide_rows_host); block 0 also copies the word at flag_src (the persistent kernel's error flag)
// to flag_dst, after the logits (forward/persistent_decode.rs `mapped_logits`), so that no copy
// from the device follows the step.
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide_host(const MvArgs a, const u8* prep, const u32* flag_src,
                                                             u32* flag_dst) {
    extern __shared__ float4 smem4[];
    pdl_trigger();
    pdl_wait();
    if (blockIdx.x == 0 && threadIdx.x == 0) *flag_dst = __ldcg(flag_src);
    wide_rows_host(a, prep_xq(a, prep, smem4), prep_scale(a, prep));
}
