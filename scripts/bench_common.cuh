// What the standalone device benchmarks share (scripts/mvbench, scripts/streambench; they include
// the engine's kernels and cuda_check.h before this).
#pragma once
#include <vector>

// n bytes of weights at p (device) filled with a pattern whose f16 fields stay finite (random
// bytes with sane scales would not change the speed).
static void fill_weights(u8* p, size_t n) {
    std::vector<u32> h(1 << 24);
    u32 s = 12345;
    for (auto& v : h) {
        s = s * 1664525u + 1013904223u;
        v = s & 0x3bff3bffu;
    }
    for (size_t off = 0; off < n; off += h.size() * 4)
        CK(cudaMemcpy(p + off, h.data(), std::min(h.size() * 4, n - off), cudaMemcpyHostToDevice));
}

// The input row quantized once (one block), as matvec's load_input leaves it in shared memory.
__global__ void bench_prep_xq(const float* x, int cols, u8* out) {
    extern __shared__ float4 pq_smem[];
    float* xs = (float*)pq_smem;
    load_row(x, xs, cols);
    __syncthreads();
    quantize_q16(xs, cols, (u8*)(xs + cols));
    const int4* src = (const int4*)(xs + cols);
    for (int i = threadIdx.x; i < xq_bytes(cols) / 16; i += blockDim.x) ((int4*)out)[i] = src[i];
}
