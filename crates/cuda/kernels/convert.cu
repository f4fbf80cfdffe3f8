// f16 operands for the prefill GEMM on tensor cores (cuBLAS): a weight matrix dequantized from its
// GGUF blocks, activations rounded to f16, and the bias added to the f32 product afterwards.

// out[r][8c .. 8c+8] = row r's chunk c, as f16 (round to nearest even).
MOLLA_KERNEL void dequant_f16(const u8* __restrict__ w, int ty, int rows, int cols, int row_bytes,
                                       u16* __restrict__ out) {
    long long per_row = cols >> 3, n = (long long)rows * per_row;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int r = (int)(i / per_row), c = (int)(i % per_row);
        float v[8];
        dq8_rt(ty, w + (size_t)r * row_bytes, c, v);
        uint4 o;
        o.x = (u32)f2h(v[0]) | ((u32)f2h(v[1]) << 16);
        o.y = (u32)f2h(v[2]) | ((u32)f2h(v[3]) << 16);
        o.z = (u32)f2h(v[4]) | ((u32)f2h(v[5]) << 16);
        o.w = (u32)f2h(v[6]) | ((u32)f2h(v[7]) << 16);
        *(uint4*)(out + (size_t)r * cols + 8 * c) = o;
    }
}

// out = f16(x); with lo (not null) also lo = f16(x - out), so that out + lo carries about 22 bits
// of x (the split prefill: two GEMMs, the second adding W·lo).
MOLLA_KERNEL void to_f16(const float* __restrict__ x, u16* __restrict__ out, u16* __restrict__ lo, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        u16 h = f2h(x[i]);
        out[i] = h;
        if (lo) lo[i] = f2h(x[i] - h2f(h));
    }
}

// y[t][r] += b[r] for t < n, r < rows.
MOLLA_KERNEL void add_bias_rows(float* y, const float* __restrict__ b, int rows, long long n) {
    long long total = (long long)rows * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x)
        y[i] += b[i % rows];
}
