// Latency of the persistent kernel's input preparation in one block (the GPU machine has nvcc,
// no Rust): quantize_q16_unsynced and quantize_q16_w (q16.cuh, the engine's code) on a row of
// the small models' widths, then the block barrier, timed with clock64 by thread 0 and averaged
// over many rounds; beside it the bare barrier (and four, and three named barriers of 128 threads
// before it) and a bare shared load.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o qbench scripts/qbench/qbench.cu && ./qbench
//
// Session 34 (H200, 1980 MHz), SM cycles a round at 256 / 384 threads: barrier 209-212 / 234, a
// shared load at a computed index and barrier 430-434 / 468-478 (most of it the index's integer
// modulo, since taken out), plain 844-895 / 978-1028, norm 955-1071 / 1105-1230; with approximate
// divisions and without the sums (other bits) 504-564 / 539-610. Session 35, 576 / 896 / 1536
// values: barrier 175-178 / 233-238, loadonly 215-221 / 314-325, plain 802, 782, 820 / 963, 975,
// 1010, norm 907, 962, 1041 / 1141-1262; FASTDIV (q16_block's divisions as div.rn's fast path
// without its range check and branch, the maximum as a tree; the same bits on every divisor,
// checked on the device) 822, 810, 856 / 991-1047: no faster, so removed (its code: 4ccab15).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "../../crates/cuda/kernels/common.cuh"
#include "../../crates/cuda/kernels/q16.cuh"

#include "../cuda_check.h"

enum { BARRIER = 0, PLAIN = 1, NORM = 2, LOADONLY = 3, BARRIER4 = 4, NAMED4 = 5 };

template <int NT>
__global__ void __launch_bounds__(NT) qbench(const float* x, const float* w, int cols, int rounds, int variant,
                                             long long* out, int* sink) {
    extern __shared__ float4 sm4[];
    float* xs = (float*)sm4;
    float* nw = xs + cols;
    float* raw = nw + cols;
    u8* xq = (u8*)(raw + cols);
    for (int i = threadIdx.x; i < cols; i += NT) xs[i] = x[i], nw[i] = w[i];
    __syncthreads();
    long long total = 0;
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        // A fresh row each round, as the pollers leave it (written, then a barrier).
        for (int i = threadIdx.x; i < cols; i += NT) xs[i] = x[i] * (1.f + r * 1e-7f);
        __syncthreads();
        long long t0 = clock64();
        if (variant == PLAIN) quantize_q16_unsynced<NT>(xs, cols, xq);
        else if (variant == NORM) quantize_q16_w<NT>(xs, cols, xq, nw, raw);
        else if (variant == LOADONLY) acc += __float_as_int(xs[threadIdx.x & 511]);
        else if (variant == BARRIER4) {
            // Three more block barriers: the marginal cost of one is (this - barrier) / 3.
            __syncthreads();
            __syncthreads();
            __syncthreads();
        } else if (variant == NAMED4 && threadIdx.x < 128) {
            // Three named barriers of the first 128 threads (the persistent kernel's pollers').
            asm volatile("bar.sync 1, 128;" ::: "memory");
            asm volatile("bar.sync 1, 128;" ::: "memory");
            asm volatile("bar.sync 1, 128;" ::: "memory");
        }
        __syncthreads();
        long long t1 = clock64();
        total += t1 - t0;
        acc += ((const int*)xq)[threadIdx.x % 16];
    }
    if (threadIdx.x == 0) *out = total / rounds;
    if (acc == 0x12345678) *sink = acc;
}

template <int NT>
long long run(const float* x, const float* w, int cols, int variant, long long* d_out, int* sink) {
    const int rounds = 2000;
    size_t smem = 3 * cols * sizeof(float) + xq_bytes(cols) + 64;
    qbench<NT><<<1, NT, smem>>>(x, w, cols, rounds, variant, d_out, sink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    long long c;
    CK(cudaMemcpy(&c, d_out, sizeof(c), cudaMemcpyDeviceToHost));
    return c;
}

int main() {
    const int maxc = 4864;
    float hx[maxc], hw[maxc];
    for (int i = 0; i < maxc; i++) hx[i] = (float)((i * 7919) % 2001 - 1000) / 300.f, hw[i] = 1.f + (i % 13) / 50.f;
    float *x, *w;
    long long* d_out;
    int* sink;
    CK(cudaMalloc(&x, sizeof(hx)));
    CK(cudaMalloc(&w, sizeof(hw)));
    CK(cudaMalloc(&d_out, sizeof(long long)));
    CK(cudaMalloc(&sink, sizeof(int)));
    CK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw, sizeof(hw), cudaMemcpyHostToDevice));
    const char* names[] = {"barrier", "plain", "norm", "loadonly", "barrier x4", "128-thread named x3 + barrier"};
    printf("| variant | cols | 256 threads | 384 threads |  (SM cycles a round: the work and one barrier)\n|---|---|---|---|\n");
    for (int cols : {576, 896, 1536})
        for (int v : {BARRIER, BARRIER4, NAMED4, LOADONLY, PLAIN, NORM})
            printf("| %s | %d | %lld | %lld |\n", names[v], cols, run<256>(x, w, cols, v, d_out, sink),
                   run<384>(x, w, cols, v, d_out, sink));
    return 0;
}
