// RMSNorm over rows: out = x / sqrt(mean(x^2) + eps) * w, one block per row, the sum of squares
// in f64 as the CPU reference does.

MOLLA_KERNEL void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out,
                                    int n, float eps) {
    __shared__ double red[32];
    const float* xr = x + (size_t)blockIdx.x * n;
    float* orow = out + (size_t)blockIdx.x * n;
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
