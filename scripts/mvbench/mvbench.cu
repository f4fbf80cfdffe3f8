// Decode-matvec microbenchmark for the GPU machine (it has nvcc, no Rust): the graph path's
// `matvec` kernel against variants of a wide-row matvec on the Llama-3.1-8B shapes, in GB/s of
// weights streamed, with the same row decoders (q16.cuh) as the engine. Weights are cycled over
// buffers several times the L2 so every launch streams from HBM, as decode does.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o mvbench scripts/mvbench/mvbench.cu && ./mvbench
//
// Prints one line a (kernel, shape): registers, blocks an SM, us a launch, GB/s, and whether its
// outputs equal the `matvec` kernel's bit for bit.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "../../crates/cuda/kernels/common.cuh"
#include "../../crates/cuda/kernels/dequant.cuh"
#include "../../crates/cuda/kernels/q16.cuh"
#include "../../crates/cuda/kernels/matvec.cu"

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

// The input row quantized once (one block), as matvec's load_input leaves it in shared memory.
__global__ void prep_xq(const float* x, int cols, u8* out) {
    extern __shared__ float4 pq_smem[];
    float* xs = (float*)pq_smem;
    load_row(x, xs, cols);
    __syncthreads();
    quantize_q16(xs, cols, (u8*)(xs + cols));
    const int4* src = (const int4*)(xs + cols);
    for (int i = threadIdx.x; i < xq_bytes(cols) / 16; i += blockDim.x) ((int4*)out)[i] = src[i];
}

// Read-only streaming ceiling: every byte once, 16-byte loads, four in flight a thread.
__global__ void peak_read(const int4* __restrict__ p, size_t n16, int* sink) {
    int acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
        int4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = i + k * stride < n16 ? __ldg(p + i + k * stride) : make_int4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < 4; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == 0x12345678) *sink = acc;
}

// Copies the prepared xq row into shared memory.
__device__ __forceinline__ Xq xq_to_smem(const u8* __restrict__ xqg, int cols, int nt) {
    extern __shared__ int4 smq[];
    for (int i = threadIdx.x; i < xq_bytes(cols) / 16; i += nt) smq[i] = __ldg((const int4*)xqg + i);
    __syncthreads();
    return xq_at((u8*)smq, cols);
}

// Q6_K repacked for aligned loads (not in the engine; what it would gain): each 210-byte block
// padded to 224 bytes, so that its quants, high bits, scales and d sit at 16-, 8- and 2-byte
// aligned offsets and one vector load reads each piece. The arithmetic of unit_q6k<true>.
#define Q6P_BYTES 224
__device__ __forceinline__ float unit_q6k_p(const u8* __restrict__ w, const int4* xr, const Xq& x, int u) {
    const u8* b = w + (size_t)(u >> 2) * Q6P_BYTES;
    int n = (u >> 1) & 1, hf = u & 1;
    uint4 a4 = __ldg((const uint4*)(b + 64 * n + 16 * hf));
    uint4 b4 = __ldg((const uint4*)(b + 64 * n + 32 + 16 * hf));
    uint4 h4 = __ldg((const uint4*)(b + 128 + 32 * n + 16 * hf));
    uint2 s2 = __ldg((const uint2*)(b + 192 + 8 * n));
    u32 A[4] = {a4.x, a4.y, a4.z, a4.w}, B[4] = {b4.x, b4.y, b4.z, b4.w}, H[4] = {h4.x, h4.y, h4.z, h4.w};
    u32 S2[2] = {s2.x, s2.y};
    float d = h2f(ld16(b + 208));
    float acc = 0.f;
#pragma unroll
    for (int G4 = 0; G4 < 4; G4++) {
        u32 wq[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u32 l = (G4 & 1) ? B[k] : A[k];
            wq[k] = ((l >> (4 * (G4 >> 1))) & 0x0f0f0f0fu) | (((H[k] >> (2 * G4)) & 0x03030303u) << 4);
        }
        int bb = 8 * (u >> 2) + 4 * n + G4;
        int s = idot<4>(wq, xr + 2 * G4) - 32 * x.s16[2 * bb + hf];
        int si = 2 * G4 + hf;
        i8 sc = (i8)((S2[si >> 2] >> (8 * (si & 3))) & 0xffu);
        acc = __fadd_rn(acc, mul3(__fmul_rn(d, (float)sc), x.dx[bb], (float)s));
    }
    return acc;
}

// Copies `rows` rows of 210-byte Q6_K blocks (nb a row) into 224-byte slots.
__global__ void q6_pad(const u8* __restrict__ src, u8* dst, int rows, int nb) {
    size_t total = (size_t)rows * nb * 210;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t blk = i / 210, off = i % 210;
        dst[blk * Q6P_BYTES + off] = src[i];
    }
}

// A warp a row, weights straight from global memory, the row's dot product by variant V:
// 0 one unit a lane at a time with unit_q16 (the bits of row_dot_q16), 1 row_dot_q16 (two units a
// round), 2 row_dot_q16_one (matvec_wide's: Q6_K through aligned word loads).
template <int V, int T>
__device__ __forceinline__ float mv_row_dot(const u8* __restrict__ row, const Xq& x, int cols, int lane) {
    if constexpr (V == 1) return row_dot_q16<T>(row, x, cols, lane, 32);
    else if constexpr (V == 2) return row_dot_q16_one<T>(row, x, cols, lane);
    else if constexpr (V == 3) {
        // Q6_K padded (unit_q6k_p), one unit a lane at a time.
        float acc = 0.f;
        for (int u = lane; u < q16_units<T>(cols); u += 32) {
            int4 xr[8];
            load_xu<T>(x, u, xr);
            acc = __fadd_rn(acc, unit_q6k_p(row, xr, x, u));
        }
        return acc;
    } else {
        float acc = 0.f;
        for (int u = lane; u < q16_units<T>(cols); u += 32) {
            int4 xr[8];
            load_xu<T>(x, u, xr);
            acc = __fadd_rn(acc, unit_q16<T>(row, xr, x, u));
        }
        return acc;
    }
}

// R rows a warp: R = 1 by variant V (mv_row_dot), else rows_dot_q16 (each unit's input read once
// for the R rows).
template <int V, int T, int NT, int MINB, int R = 1>
__global__ void __launch_bounds__(NT, MINB) mv_warp(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    Xq x = xq_to_smem(xqg, cols, NT);
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    for (int r = (blockIdx.x * (NT / 32) + (threadIdx.x >> 5)) * R; r < rows; r += nw * R) {
        int nr = min(R, rows - r);
        float acc[R];
        if constexpr (R == 1) {
            acc[0] = mv_row_dot<V, T>(w + (size_t)r * rb, x, cols, lane);
        } else {
            const u8* wr[R];
#pragma unroll
            for (int k = 0; k < R; k++) wr[k] = w + (size_t)(r + (k < nr ? k : 0)) * rb;
            rows_dot_q16<T, R>(wr, nr, x, cols, lane, 32, acc);
        }
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < R; k++) {
            acc[k] = warp_sum(acc[k]);
            if (lane == k) v = acc[k];
        }
        if (lane < nr) y[r + lane] = v;
    }
}

typedef void (*Kern)(const u8*, int, int, int, const u8*, float*);

struct Shape {
    const char* name;
    int ty, rows, cols;
};

static int row_bytes(int ty, int cols) {
    return ty == T_Q4_K ? cols / 256 * 144 : ty == T_Q6_K ? cols / 256 * 210 : cols / 32 * 34;
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const size_t pool = (size_t)2 << 30;  // 2 GiB of weights, cycled
    u8* wpool;
    CK(cudaMalloc(&wpool, pool + 256));
    {
        // Random bytes with sane f16 scales would not change the speed; fill with a pattern.
        std::vector<u32> h(1 << 24);
        u32 s = 12345;
        for (auto& v : h) {
            s = s * 1664525u + 1013904223u;
            v = s & 0x3bff3bffu;  // f16 fields stay finite
        }
        for (size_t off = 0; off < pool; off += h.size() * 4) CK(cudaMemcpy(wpool + off, h.data(), std::min(h.size() * 4, pool - off), cudaMemcpyHostToDevice));
    }
    float *x, *y, *yref;
    u8* xq;
    int* sink;
    CK(cudaMalloc(&x, 14336 * 4));
    CK(cudaMalloc(&y, 200000 * 4));
    CK(cudaMalloc(&yref, 200000 * 4));
    CK(cudaMalloc(&xq, 64 * 1024));
    CK(cudaMalloc(&sink, 4));
    {
        std::vector<float> hx(14336);
        for (int i = 0; i < 14336; i++) hx[i] = sinf(0.37f * i) * (1.f + (i % 7));
        CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 60;
    {
        int n16 = (int)(pool / 16);
        peak_read<<<sms * 8, 256>>>((const int4*)wpool, n16, sink);
        CK(cudaEventRecord(e0));
        peak_read<<<sms * 8, 256>>>((const int4*)wpool, n16, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("peak read: %.0f GB/s\n", pool / (ms * 1e-3) / 1e9);
    }
    Shape shapes[] = {{"gate+up 28672x4096 Q4_K", T_Q4_K, 28672, 4096}, {"gate 14336x4096 Q4_K", T_Q4_K, 14336, 4096}, {"down 4096x14336 Q4_K", T_Q4_K, 4096, 14336},
                      {"wo 4096x4096 Q4_K", T_Q4_K, 4096, 4096},       {"down 4096x14336 Q6_K", T_Q6_K, 4096, 14336},
                      {"head 128256x4096 Q6_K", T_Q6_K, 128256, 4096}, {"qwen head 151936x896 Q8_0", T_Q8_0, 151936, 896}};
    for (const Shape& sh : shapes) {
        int rb = row_bytes(sh.ty, sh.cols);
        size_t mbytes = (size_t)sh.rows * rb;
        int nbuf = (int)std::max<size_t>(1, pool / mbytes);
        CK(cudaFuncSetAttribute(prep_xq, cudaFuncAttributeMaxDynamicSharedMemorySize, sh.cols * 4 + xq_bytes(sh.cols)));
        prep_xq<<<1, 128, sh.cols * 4 + xq_bytes(sh.cols)>>>(x, sh.cols, xq);
        CK(cudaGetLastError());
        auto bufw = [&](int i) { return wpool + (size_t)(i % nbuf) * mbytes; };
        // The graph path's kernel, as launch.rs launches it (mode 0).
        MvArgs a;
        memset(&a, 0, sizeof a);
        a.seg[0].rows = sh.rows;
        a.seg[0].row_bytes = rb;
        a.seg[0].ty = sh.ty;
        a.seg[0].y = yref;
        a.nseg = 1;
        a.cols = sh.cols;
        a.x = x;
        a.lanes = 32;
        int smem = sh.cols * 4 + xq_bytes(sh.cols);
        CK(cudaFuncSetAttribute(matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int blocks = std::min((sh.rows + 3) / 4, sms * 6);
        a.seg[0].w = bufw(0);
        matvec<<<blocks, 128, smem>>>(a);
        CK(cudaDeviceSynchronize());
        std::vector<float> href(sh.rows), hy(sh.rows);
        CK(cudaMemcpy(href.data(), yref, sh.rows * 4, cudaMemcpyDeviceToHost));
        {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) {
                a.seg[0].w = bufw(i + 1);
                matvec<<<blocks, 128, smem>>>(a);
            }
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, matvec));
            printf("%-24s %-22s regs %3d grid %4d  %7.2f us  %6.0f GB/s\n", sh.name, "matvec (graph path)", fa.numRegs, blocks,
                   ms * 1e3 / iters, mbytes * iters / (ms * 1e-3) / 1e9);
        }
        {
            // A plain read of the same bytes, one launch a matrix.
            size_t n16 = mbytes / 16;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) peak_read<<<sms * 8, 256>>>((const int4*)bufw(i + 1), n16, sink);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("%-24s %-22s                        %7.2f us  %6.0f GB/s\n", sh.name, "read, a launch each", ms * 1e3 / iters,
                   mbytes * iters / (ms * 1e-3) / 1e9);
        }
        // The padded copy of the reference matrix, and a padded pool stride for the timing (the
        // rest of the pool holds other bytes: the speed does not depend on them).
        int rbp = sh.ty == T_Q6_K ? sh.cols / 256 * Q6P_BYTES : rb;
        size_t pbytes = (size_t)sh.rows * rbp;
        int npbuf = (int)std::max<size_t>(1, pool / pbytes);
        u8* pad0 = nullptr;
        if (sh.ty == T_Q6_K) {
            CK(cudaMalloc(&pad0, pbytes));
            q6_pad<<<sms * 8, 256>>>(bufw(0), pad0, sh.rows, sh.cols / 256);
            CK(cudaDeviceSynchronize());
        }
        auto run = [&](const char* name, const void* fn, Kern k, int nt, int cap = 0, bool padded = false) {
            if (padded) {
                int xs = xq_bytes(sh.cols);
                CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, xs));
                int per;
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, nt, xs));
                int grid = std::min(sms * per, (sh.rows + nt / 32 - 1) / (nt / 32));
                k<<<grid, nt, xs>>>(pad0, sh.rows, rbp, sh.cols, xq, y);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
                bool same = memcmp(hy.data(), href.data(), sh.rows * 4) == 0;
                CK(cudaEventRecord(e0));
                for (int i = 0; i < iters; i++)
                    k<<<grid, nt, xs>>>(wpool + (size_t)((i + 1) % npbuf) * pbytes, sh.rows, rbp, sh.cols, xq, y);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                printf("%-24s %-22s %d/SM grid %4d  %7.2f us  %6.0f GB/s of the 210-byte blocks (%6.0f read)  %s\n", sh.name,
                       name, per, grid, ms * 1e3 / iters, mbytes * iters / (ms * 1e-3) / 1e9,
                       pbytes * iters / (ms * 1e-3) / 1e9, same ? "same bits" : "DIFFERENT BITS");
                return;
            }
            int xs = xq_bytes(sh.cols);
            CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, xs));
            int per;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, nt, xs));
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, fn));
            if (cap) per = std::min(per, cap);
            int grid = std::min(sms * per, (sh.rows + nt / 32 - 1) / (nt / 32));
            k<<<grid, nt, xs>>>(bufw(0), sh.rows, rb, sh.cols, xq, y);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
            bool same = memcmp(hy.data(), href.data(), sh.rows * 4) == 0;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) k<<<grid, nt, xs>>>(bufw(i + 1), sh.rows, rb, sh.cols, xq, y);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("%-24s %-22s regs %3d %d/SM grid %4d  %7.2f us  %6.0f GB/s  %s\n", sh.name, name, fa.numRegs, per, grid,
                   ms * 1e3 / iters, mbytes * iters / (ms * 1e-3) / 1e9, same ? "same bits" : "DIFFERENT BITS");
        };
#define RUN(name, K, nt) run(name, (const void*)K, K, nt)
#define RUNC(name, K, nt, cap) run(name, (const void*)K, K, nt, cap)
        if (sh.ty == T_Q4_K) {
            RUNC("one 256 1/SM", (mv_warp<0, T_Q4_K, 256, 1>), 256, 1);
            RUNC("rows2 256 1/SM", (mv_warp<0, T_Q4_K, 256, 1, 2>), 256, 1);
            RUNC("one 256 2/SM", (mv_warp<0, T_Q4_K, 256, 2>), 256, 2);
            RUN("one 256x4", (mv_warp<0, T_Q4_K, 256, 4>), 256);
            RUN("one 128x8", (mv_warp<0, T_Q4_K, 128, 8>), 128);
            RUN("one 512x2", (mv_warp<0, T_Q4_K, 512, 2>), 512);
            RUN("two 256x4", (mv_warp<1, T_Q4_K, 256, 4>), 256);
            RUN("rows2 256x2", (mv_warp<0, T_Q4_K, 256, 2, 2>), 256);
        } else if (sh.ty == T_Q8_0) {
            // The Qwen2.5-0.5B head: the persistent kernel's occupancy (one block of 8 warps an
            // SM) against matvec_wide's (MOLLA_PK_HEAD=wide).
            RUNC("one 256 1/SM", (mv_warp<0, T_Q8_0, 256, 1>), 256, 1);
            RUNC("rows2 256 1/SM", (mv_warp<0, T_Q8_0, 256, 1, 2>), 256, 1);
            RUN("wide 256x4", (mv_warp<2, T_Q8_0, 256, 4>), 256);
            RUN("one 256x4", (mv_warp<0, T_Q8_0, 256, 4>), 256);
        } else {
            RUN("one 256x2", (mv_warp<0, T_Q6_K, 256, 2>), 256);
            RUN("one 256x4", (mv_warp<0, T_Q6_K, 256, 4>), 256);
            RUN("q6w 256x4", (mv_warp<2, T_Q6_K, 256, 4>), 256);
            RUN("q6w 128x8", (mv_warp<2, T_Q6_K, 128, 8>), 128);
            RUN("q6w 256x2", (mv_warp<2, T_Q6_K, 256, 2>), 256);
            RUN("two 256x2", (mv_warp<1, T_Q6_K, 256, 2>), 256);
            RUN("rows2 256x2", (mv_warp<0, T_Q6_K, 256, 2, 2>), 256);
            run("q6 padded 256x4", (const void*)mv_warp<3, T_Q6_K, 256, 4>, mv_warp<3, T_Q6_K, 256, 4>, 256, 0, true);
            run("q6 padded 128x8", (const void*)mv_warp<3, T_Q6_K, 128, 8>, mv_warp<3, T_Q6_K, 128, 8>, 128, 0, true);
        }
        if (pad0) CK(cudaFree(pad0));
    }
    return 0;
}
