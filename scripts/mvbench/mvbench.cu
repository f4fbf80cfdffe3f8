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

// V1: a warp a row, one unit a lane at a time (the bits of row_dot_q16), weights straight from
// global memory.
template <int T, int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) mv_one(const u8* __restrict__ w, int rows, int rb, int cols,
                                                   const u8* __restrict__ xqg, float* y) {
    Xq x = xq_to_smem(xqg, cols, NT);
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    int nu = q16_units<T>(cols);
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        const u8* row = w + (size_t)r * rb;
        float acc = 0.f;
        for (int u = lane; u < nu; u += 32) {
            int4 xr[8];
            load_xu<T>(x, u, xr);
            acc = __fadd_rn(acc, unit_q16<T>(row, xr, x, u));
        }
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
    }
}

// V2: row_dot_q16 (two units a round) a warp a row.
template <int T, int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) mv_two(const u8* __restrict__ w, int rows, int rb, int cols,
                                                   const u8* __restrict__ xqg, float* y) {
    Xq x = xq_to_smem(xqg, cols, NT);
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        float acc = warp_sum(row_dot_q16<T>(w + (size_t)r * rb, x, cols, lane, 32));
        if (lane == 0) y[r] = acc;
    }
}

// V3: R rows a warp (rows_dot_q16), sharing each unit's input.
template <int T, int NT, int MINB, int R>
__global__ void __launch_bounds__(NT, MINB) mv_rows(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    Xq x = xq_to_smem(xqg, cols, NT);
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    for (int r = (blockIdx.x * (NT / 32) + (threadIdx.x >> 5)) * R; r < rows; r += nw * R) {
        const u8* wr[R];
        int nr = min(R, rows - r);
#pragma unroll
        for (int k = 0; k < R; k++) wr[k] = w + (size_t)(r + (k < nr ? k : 0)) * rb;
        float acc[R];
        rows_dot_q16<T, R>(wr, nr, x, cols, lane, 32, acc);
#pragma unroll
        for (int k = 0; k < R; k++) acc[k] = warp_sum(acc[k]);
        if (lane < nr) {
            float v = acc[0];
#pragma unroll
            for (int k = 1; k < R; k++)
                if (lane == k) v = acc[k];
            y[r + lane] = v;
        }
    }
}

// V4: V1 with the next unit's raw weight words loaded before this unit is summed (Q4_K only).
__device__ __forceinline__ void k4_raw(const u8* __restrict__ row, int u, uint4& h, uint4& qa, uint4& qb) {
    const u8* b = row + (size_t)(u >> 2) * 144;
    int j = u & 3;
    h = __ldg((const uint4*)b);
    qa = __ldg((const uint4*)(b + 16 + 32 * j));
    qb = __ldg((const uint4*)(b + 16 + 32 * j + 16));
}

// unit_k45<T_Q4_K>'s arithmetic on words already loaded.
__device__ __forceinline__ float k4_apply(uint4 h, uint4 qa, uint4 qb, const int4* xr, const Xq& x, int u) {
    int j = u & 3;
    u32 q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    u32 lo[8], hi[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        lo[k] = q[k] & 0x0f0f0f0fu;
        hi[k] = (q[k] >> 4) & 0x0f0f0f0fu;
    }
    int sc[2], mn[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int s = 2 * j + e;
        int sl = 8 * (s & 3);
        u32 yy = h.y >> sl, z = h.z >> sl, ww = h.w >> sl;
        int lo_sc = (int)(yy & 63), lo_mn = (int)(z & 63);
        int hi_sc = (int)((ww & 15) | (((yy >> 6) & 3) << 4));
        int hi_mn = (int)(((ww >> 4) & 15) | (((z >> 6) & 3) << 4));
        sc[e] = s < 4 ? lo_sc : hi_sc;
        mn[e] = s < 4 ? lo_mn : hi_mn;
    }
    float d = h2f((u16)(h.x & 0xffff)), dm = h2f((u16)(h.x >> 16));
    int b0 = 8 * (u >> 2) + 2 * j;
    int s0 = idot<8>(lo, xr), s1 = idot<8>(hi, xr + 4);
    float p0 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[0]), x.dx[b0], (float)s0), __fmul_rn(__fmul_rn(dm, (float)mn[0]), x.sx[b0]));
    float p1 = __fsub_rn(mul3(__fmul_rn(d, (float)sc[1]), x.dx[b0 + 1], (float)s1),
                         __fmul_rn(__fmul_rn(dm, (float)mn[1]), x.sx[b0 + 1]));
    return __fadd_rn(p0, p1);
}

template <int NT, int MINB, int P>
__global__ void __launch_bounds__(NT, MINB) mv_pipe(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    int nu = cols >> 6;
    int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
    uint4 h[P], qa[P], qb[P];
    // The first row's first units are asked for before the input is in shared memory.
    if (r < rows) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            int u = lane + 32 * p;
            if (u < nu) k4_raw(w + (size_t)r * rb, u, h[p], qa[p], qb[p]);
        }
    }
    Xq x = xq_to_smem(xqg, cols, NT);
    for (; r < rows; r += nw) {
        const u8* row = w + (size_t)r * rb;
        float acc = 0.f;
        for (int u0 = lane; u0 < nu; u0 += 32 * P) {
#pragma unroll
            for (int p = 0; p < P; p++) {
                int u = u0 + 32 * p;
                if (u < nu) {
                    uint4 ch = h[p], ca = qa[p], cb = qb[p];
                    int un = u + 32 * P;
                    if (un < nu) k4_raw(row, un, h[p], qa[p], qb[p]);
                    int4 xr[8];
                    load_xu<T_Q4_K>(x, u, xr);
                    acc = __fadd_rn(acc, k4_apply(ch, ca, cb, xr, x, u));
                }
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
        int rn = r + nw;
        if (rn < rows) {
#pragma unroll
            for (int p = 0; p < P; p++) {
                int u = lane + 32 * p;
                if (u < nu) k4_raw(w + (size_t)rn * rb, u, h[p], qa[p], qb[p]);
            }
        }
    }
}

// Q6_K with word loads: 16 bytes from a 2-byte aligned global address as five aligned words and
// funnel shifts (unit_q6k uses eight 2-byte loads), the same bytes, so the same bits.
__device__ __forceinline__ void ld16w(const u8* p, u32* w) {
    const u32* a = (const u32*)((size_t)p & ~(size_t)3);
    u32 sh = (u32)((size_t)p & 2) * 8;
    u32 x[5];
#pragma unroll
    for (int k = 0; k < 5; k++) x[k] = __ldg(a + k);
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = __funnelshift_r(x[k], x[k + 1], sh);
}

__device__ __forceinline__ float unit_q6k_w(const u8* __restrict__ w, const int4* xr, const Xq& x, int u) {
    const u8* b = w + (size_t)(u >> 2) * 210;
    int n = (u >> 1) & 1, hf = u & 1;
    u32 A[4], B[4], H[4], S4[4];
    ld16w(b + 64 * n + 16 * hf, A);
    ld16w(b + 64 * n + 32 + 16 * hf, B);
    ld16w(b + 128 + 32 * n + 16 * hf, H);
    ld16w(b + 192 + 8 * n, S4);  // scales 8n .. 8n + 8 (and 8 more bytes)
    float d = h2f(ld16(b + 208));
    float acc = 0.f;
#pragma unroll
    for (int G = 0; G < 4; G++) {
        u32 wq[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u32 l = (G & 1) ? B[k] : A[k];
            wq[k] = ((l >> (4 * (G >> 1))) & 0x0f0f0f0fu) | (((H[k] >> (2 * G)) & 0x03030303u) << 4);
        }
        int bb = 8 * (u >> 2) + 4 * n + G;
        int s = idot<4>(wq, xr + 2 * G) - 32 * x.s16[2 * bb + hf];
        int si = 2 * G + hf;  // byte of S4
        i8 sc = (i8)((S4[si >> 2] >> (8 * (si & 3))) & 0xff);
        acc = __fadd_rn(acc, mul3(__fmul_rn(d, (float)sc), x.dx[bb], (float)s));
    }
    return acc;
}

template <int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) mv_q6w(const u8* __restrict__ w, int rows, int rb, int cols,
                                                   const u8* __restrict__ xqg, float* y) {
    Xq x = xq_to_smem(xqg, cols, NT);
    int lane = threadIdx.x & 31;
    int nw = gridDim.x * (NT / 32);
    int nu = cols >> 6;
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        const u8* row = w + (size_t)r * rb;
        float acc = 0.f;
        for (int u = lane; u < nu; u += 32) {
            int4 xr[8];
            load_xu<T_Q6_K>(x, u, xr);
            acc = __fadd_rn(acc, unit_q6k_w(row, xr, x, u));
        }
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
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
                      {"head 128256x4096 Q6_K", T_Q6_K, 128256, 4096}};
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
        auto run = [&](const char* name, const void* fn, Kern k, int nt, int cap = 0) {
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
            RUNC("one 256 1/SM", (mv_one<T_Q4_K, 256, 1>), 256, 1);
            RUNC("rows2 256 1/SM", (mv_rows<T_Q4_K, 256, 1, 2>), 256, 1);
            RUNC("pipe1 256 1/SM", (mv_pipe<256, 1, 1>), 256, 1);
            RUNC("pipe2 256 1/SM", (mv_pipe<256, 1, 2>), 256, 1);
            RUNC("one 256 2/SM", (mv_one<T_Q4_K, 256, 2>), 256, 2);
            RUN("one 256x4", (mv_one<T_Q4_K, 256, 4>), 256);
            RUN("one 128x8", (mv_one<T_Q4_K, 128, 8>), 128);
            RUN("one 512x2", (mv_one<T_Q4_K, 512, 2>), 512);
            RUN("two 256x4", (mv_two<T_Q4_K, 256, 4>), 256);
            RUN("rows2 256x2", (mv_rows<T_Q4_K, 256, 2, 2>), 256);
            RUN("pipe1 256x4", (mv_pipe<256, 4, 1>), 256);
            RUN("pipe1 128x8", (mv_pipe<128, 8, 1>), 128);
            RUN("pipe2 256x3", (mv_pipe<256, 3, 2>), 256);
        } else {
            RUN("one 256x2", (mv_one<T_Q6_K, 256, 2>), 256);
            RUN("one 256x4", (mv_one<T_Q6_K, 256, 4>), 256);
            RUN("q6w 256x4", (mv_q6w<256, 4>), 256);
            RUN("q6w 128x8", (mv_q6w<128, 8>), 128);
            RUN("q6w 256x2", (mv_q6w<256, 2>), 256);
            RUN("two 256x2", (mv_two<T_Q6_K, 256, 2>), 256);
            RUN("rows2 256x2", (mv_rows<T_Q6_K, 256, 2, 2>), 256);
        }
    }
    return 0;
}
