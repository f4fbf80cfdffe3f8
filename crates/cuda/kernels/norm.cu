// RMSNorm over rows: out = x / sqrt(mean(x^2) + eps) * w, one block per row, the sum of squares
// in f64 as the CPU reference does.

// out = x / sqrt(mean(x^2) + eps) * w over one row of n (the block's threads; out may be x).
__device__ __forceinline__ void rms_norm_row(const float* xr, const float* __restrict__ w, float* orow, int n,
                                             float eps) {
    __shared__ double red[32];
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double v = xr[i];
        ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
        red[0] = t;
    }
    __syncthreads();
    float scale = (float)(1.0 / sqrt(red[0] / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) orow[i] = xr[i] * scale * w[i];
}

MOLLA_KERNEL void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out,
                                    int n, float eps) {
    rms_norm_row(x + (size_t)blockIdx.x * n, w, out + (size_t)blockIdx.x * n, n, eps);
}

// rms_norm in place, a row a block: qwen3's per-head norms of q and k before rope (a row a head).
MOLLA_KERNEL void rms_norm_inplace(float* x, const float* __restrict__ w, int n, float eps) {
    float* r = x + (size_t)blockIdx.x * n;
    rms_norm_row(r, w, r, n, eps);
}

// A branch added onto the residual stream, row by row (a block a row of n): x += h, with h first
// RMS-normed by w (gemma's post-norms; w null: no norm) and then multiplied by `scale` (granite's
// residual scale; 1: none), in the CPU's order (cpu/src/block.rs add_branch). h is overwritten.
MOLLA_KERNEL void add_branch(float* __restrict__ x, float* h, const float* __restrict__ w, int n, float eps,
                                      float scale) {
    float* hr = h + (size_t)blockIdx.x * n;
    float* xr = x + (size_t)blockIdx.x * n;
    if (w) {
        rms_norm_row(hr, w, hr, n, eps);
        __syncthreads();
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = hr[i];
        if (scale != 1.0f) v = __fmul_rn(v, scale);
        xr[i] = __fadd_rn(xr[i], v);
    }
}
