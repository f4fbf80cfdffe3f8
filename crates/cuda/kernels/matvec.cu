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

// Prepares the input row in shared memory (all threads of the block take part).
__device__ void load_input(const MvArgs& a, float* xs) {
    int n = a.cols;
    if (a.mode == 1) {
        __shared__ double red[32];
        double ss = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            double v = a.x[i];
            ss += v * v;
        }
        for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        if (threadIdx.x == 0) {
            double t = 0.0;
            for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
            red[0] = t;
        }
        __syncthreads();
        float scale = (float)(1.0 / sqrt(red[0] / n + (double)a.eps));
        for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = a.x[i] * scale * a.norm_w[i];
    } else if (a.mode == 2) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float g = a.x[i];
            xs[i] = g / (1.0f + expf(-g)) * a.x2[i];
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = a.x[i];
    }
    __syncthreads();
}

extern "C" __global__ void matvec(const MvArgs a) {
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
            int nch = a.cols >> 3;
            switch (s.ty) {
                case T_F32: acc = row_dot<T_F32>(w, xs, nch, lane, lanes); break;
                case T_F16: acc = row_dot<T_F16>(w, xs, nch, lane, lanes); break;
                case T_BF16: acc = row_dot<T_BF16>(w, xs, nch, lane, lanes); break;
                case T_Q4_0: acc = row_dot<T_Q4_0>(w, xs, nch, lane, lanes); break;
                case T_Q4_1: acc = row_dot<T_Q4_1>(w, xs, nch, lane, lanes); break;
                case T_Q5_0: acc = row_dot<T_Q5_0>(w, xs, nch, lane, lanes); break;
                case T_Q5_1: acc = row_dot<T_Q5_1>(w, xs, nch, lane, lanes); break;
                case T_Q8_0: acc = row_dot<T_Q8_0>(w, xs, nch, lane, lanes); break;
                case T_Q2_K: acc = row_dot<T_Q2_K>(w, xs, nch, lane, lanes); break;
                case T_Q3_K: acc = row_dot<T_Q3_K>(w, xs, nch, lane, lanes); break;
                case T_Q4_K: acc = row_dot<T_Q4_K>(w, xs, nch, lane, lanes); break;
                case T_Q5_K: acc = row_dot<T_Q5_K>(w, xs, nch, lane, lanes); break;
                case T_Q6_K: acc = row_dot<T_Q6_K>(w, xs, nch, lane, lanes); break;
                default: acc = __int_as_float(0x7fc00000);
            }
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
