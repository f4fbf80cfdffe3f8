// Decode-matvec microbenchmark for the GPU machine (it has nvcc, no Rust): the graph path's
// `matvec` kernel against variants of a wide-row matvec on the Llama-3.1-8B shapes, in GB/s of
// weights streamed, with the same row decoders (q16.cuh) as the engine. Weights are cycled over
// buffers several times the L2 so every launch streams from HBM, as decode does.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o mvbench scripts/mvbench/mvbench.cu && ./mvbench
//
// Q6_K rows are laid out in 224-byte blocks, as the engine pads them (kernels/common.cuh
// Q6K_BYTES), and GB/s count the padded bytes (multiply by 210 / 224 for the file's); with
// -DMOLLA_X_Q6FILE (MOLLA_KDEFS=Q6FILE in the engine) in the file's 210-byte blocks. With
// -DMOLLA_LEGPAD, Q8_0 rows are in the engine's padded 36-byte blocks (`./mvbench q8`: the
// heads' walk on them, "file layout (engine)", against a build without it).
//
// Prints one line a (kernel, shape): registers, blocks an SM, us a launch, GB/s, and whether its
// outputs equal the `matvec` kernel's bit for bit. `./mvbench read`: read-pattern probes only;
// `./mvbench repack`: the Q4_K lean walk on the file's layout against a repacked one.
// `./mvbench pf` (pf.cuh): the 8B's matvecs after an attention-length launch that asks L2 for
// their matrix (bulk or a line at a time) or not, and with the matrix L2-resident.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "../../crates/cuda/kernels/common.cuh"
#include "../../crates/cuda/kernels/ktrace.cuh"
#include "../../crates/cuda/kernels/dequant.cuh"
#include "../../crates/cuda/kernels/q16.cuh"
#include "../../crates/cuda/kernels/q16_rows.cuh"
#include "../../crates/cuda/kernels/cp_async.cuh"
#include "../../crates/cuda/kernels/q16_lean.cuh"
#include "../../crates/cuda/kernels/matvec.cu"

#include "../cuda_check.h"
#include "../bench_common.cuh"

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

// A warp a row, weights straight from global memory, the row's dot product by variant V:
// 0 one unit a lane at a time with unit_q16 (the bits of row_dot_q16), 1 row_dot_q16 (two units a
// round), 2 row_dot_q16_one (matvec_wide's: Q6_K through aligned word loads).
template <int V, int T>
__device__ __forceinline__ float mv_row_dot(const u8* __restrict__ row, const Xq& x, int cols, int lane) {
    if constexpr (V == 1) return row_dot_q16<T>(row, x, cols, lane, 32);
    else if constexpr (V == 2) return row_dot_q16_one<T>(row, x, cols, lane);
    else {
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

// Weights staged by the bulk copy engine (TMA): each warp streams its rows (r = its global warp
// index + k * all warps, as matvec_wide strides) through S slots of its own in shared memory,
// lane 0 issuing one cp.async.bulk a row that completes on the slot's mbarrier, S - 1 rows ahead
// of the one being decoded, so that a warp keeps S rows' bytes in flight without registers. The
// rows are decoded from shared memory with the same unit decoders and the same per-lane order
// as row_dot_q16_one: the same bits. Rows must be multiples of 16 bytes (Q4_K, padded Q6_K).
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bulk_row(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 phase) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_u32(bar)), "r"(phase)
            : "memory");
    }
}
template <int T, int NT, int MINB, int S>
__global__ void __launch_bounds__(NT, MINB) mv_bulk(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    extern __shared__ int4 smq[];
    __shared__ __align__(8) u64 bar[NT / 32][S];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gw = blockIdx.x * (NT / 32) + warp, nw = gridDim.x * (NT / 32);
    const int xb = xq_bytes(cols);
    u8* slots = (u8*)smq + xb + (size_t)warp * S * rb;
    if (lane == 0) {
        for (int s = 0; s < S; s++) mbar_init(&bar[warp][s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int s = 0; s < S; s++) {
            int r = gw + s * nw;
            if (r < rows) bulk_row(slots + (size_t)s * rb, w + (size_t)r * rb, rb, &bar[warp][s]);
        }
    }
    for (int i = threadIdx.x; i < xb / 16; i += NT) smq[i] = __ldg((const int4*)xqg + i);
    __syncthreads();
    const Xq x = xq_at((u8*)smq, cols);
    int k = 0;
    for (int r = gw; r < rows; r += nw, k++) {
        const int s = k % S;
        mbar_wait(&bar[warp][s], (u32)(k / S) & 1);
        const u8* row = slots + (size_t)s * rb;
        float acc = 0.f;
        for (int u = lane; u < q16_units<T>(cols); u += 32) {
            int4 xr[8];
            load_xu<T>(x, u, xr);
            acc = __fadd_rn(acc, unit_q16<T, false>(row, xr, x, u));
        }
        __syncwarp();
        const int rn = r + S * nw;
        if (lane == 0 && rn < rows) bulk_row(slots + (size_t)s * rb, w + (size_t)rn * rb, rb, &bar[warp][s]);
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
    }
}

// Read-pattern probes (`./mvbench read`): the bytes a matvec streams, loaded and XORed into a
// value a row (no arithmetic, so the y they write differs from matvec's), to tell whether the
// wide matvec's speed is its access pattern or its decode. Grid, blocks an SM and row order as
// matvec_wide (wide_rows: a warp a row, the grid's warps striding over the rows).
// P 0: Q4_K rows in row_dot_k4_lean's pattern (lane l: super-block l / 4 of each run of eight,
// its 16-byte header and sub-block pair l % 4's two 16-byte quant pieces; rows of 64 units or
// fewer only, one unit a lane a round as the lean walk takes them).
// P 1: lanes contiguous: lane l takes bytes 16 l .. of each 512-byte piece of the row, every
// piece's load issued before any is used (B a lane at a time; rows of whole 16-byte units).
template <int P, int NT, int MINB, int B = 8>
__global__ void __launch_bounds__(NT, MINB) rd_rows(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    const int lane = threadIdx.x & 31, nw = gridDim.x * (NT / 32);
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        const u8* row = w + (size_t)r * rb;
        u32 acc = 0;
        if constexpr (P == 0) {
            const int j = lane & 3, nu = cols >> 6;
            const u8* p = row + 144 * (lane >> 2);
            for (int u = lane; u < nu; u += 32, p += 1152) {
                const uint4 h = *(const uint4*)p, qa = *(const uint4*)(p + 16 + 32 * j), qb = *(const uint4*)(p + 32 + 32 * j);
                acc ^= h.x ^ h.w ^ qa.x ^ qa.y ^ qa.z ^ qa.w ^ qb.x ^ qb.y ^ qb.z ^ qb.w;
            }
        } else {
            const int n = rb >> 9;
            for (int k0 = 0; k0 <= n; k0 += B) {
                uint4 v[B];
#pragma unroll
                for (int k = 0; k < B; k++) {
                    const int o = 512 * (k0 + k) + 16 * lane;
                    v[k] = o + 16 <= rb ? __ldg((const uint4*)(row + o)) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int k = 0; k < B; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
            }
        }
        acc = __reduce_xor_sync(0xffffffffu, acc);
        if (lane == 0) y[r] = __uint_as_float(acc & 0x7fffff);
    }
    (void)xqg;
}

// The same bytes read as one flat array by the same grid (16 bytes a thread, four in flight):
// the ceiling for the grid matvec_wide runs.
template <int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) rd_flat(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    const int4* p = (const int4*)w;
    const size_t n16 = (size_t)rows * rb / 16, stride = (size_t)gridDim.x * NT;
    int acc = 0;
    for (size_t i = blockIdx.x * NT + threadIdx.x; i < n16; i += 4 * stride) {
        int4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = i + k * stride < n16 ? __ldg(p + i + k * stride) : make_int4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < 4; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == 0x12345678) y[0] = 1.f;
    (void)cols;
    (void)xqg;
}

// row_dot_k4_rp (below): the lean walk on repacked rows.
__device__ __forceinline__ float row_dot_k4_rp(const u8* __restrict__ w, const Xq& x, int cols, int lane, u32 xa);

// matvec_wide's own row walk on one Q4_K matrix (wide_rows' lean path), for comparison in this
// harness: the same bits as matvec. RP: on repacked rows (`./mvbench repack`; the lean walk
// only, whose input row starts on a 128-byte boundary in xq_to_smem's buffer).
template <int NT, int MINB, bool RP = false>
__global__ void __launch_bounds__(NT, MINB) mv_lean(const u8* __restrict__ w, int rows, int rb, int cols,
                                                    const u8* __restrict__ xqg, float* y) {
    const Xq x = xq_to_smem(xqg, cols, NT);
    const int lane = threadIdx.x & 31, nw = gridDim.x * (NT / 32);
    bool lean;
    const u32 xa = lean_xa(x, lane, lean);
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        float acc = RP     ? row_dot_k4_rp(w + (size_t)r * rb, x, cols, lane, xa)
                    : lean ? row_dot_k4_lean(w + (size_t)r * rb, x, cols, lane, xa)
                           : row_dot_q16_one<T_Q4_K>(w + (size_t)r * rb, x, cols, lane);
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
    }
}

// Q4_K rows repacked for the lean walk (`./mvbench repack`, session 43): each run of eight
// super-blocks (1152 bytes, the 32 units a warp's lanes take in one round) laid out as the eight
// 16-byte headers, then lane l's first 16 quant bytes at 128 + 16 l, then its second at
// 640 + 16 l, so that each of a lane's three loads is one of the warp's whole 128-byte lines (the
// file's layout has the lanes' quant pieces 16 bytes apart in 144-byte blocks: every load touches
// nine lines in part). Rows of whole runs only (the 8B's 4096 and 14336 columns). The same
// bytes reach the same lane's registers, so the same bits as row_dot_k4_lean.
__global__ void repack_q4k(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t runs) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < runs * 72; i += (size_t)gridDim.x * blockDim.x) {
        const size_t run = i / 72;
        const int k = (int)(i % 72), sb = k / 9, piece = k % 9;
        int to;
        if (piece == 0) {
            to = sb;
        } else {
            const int lane = 4 * sb + (piece - 1) / 2;
            to = ((piece - 1) & 1 ? 40 : 8) + lane;
        }
        dst[run * 72 + to] = src[i];
    }
}

// row_dot_k4_lean on a repacked row (the same units in the same order, two at a time for rows of
// more than 64 units as the lean walk takes them).
__device__ __forceinline__ float row_dot_k4_rp(const u8* __restrict__ w, const Xq& x, int cols, int lane, u32 xa) {
    const int nu = cols >> 6, j = lane & 3;
    const u8* p = w;
    const int sl0 = 8 * ((2 * j) & 3), sl1 = 8 * ((2 * j + 1) & 3);
    const bool hi = j >= 2;
    const int oh = 16 * (lane >> 2), oa = 128 + 16 * lane, ob = 640 + 16 * lane;
    float acc = 0.f;
    if (nu > 64) {
        for (int u = lane; u < nu; u += 64, p += 2304, xa += 8192u) {
            const bool two = u + 32 < nu;
            const u8* p1 = two ? p + 1152 : p;
            const uint4 h = ldw16(p + oh), qa = ldw16(p + oa), qb = ldw16(p + ob);
            const uint4 h1 = ldw16(p1 + oh), qa1 = ldw16(p1 + oa), qb1 = ldw16(p1 + ob);
            acc = __fadd_rn(acc, k4_lean_unit(h, qa, qb, xa, x, u, sl0, sl1, hi));
            if (two) acc = __fadd_rn(acc, k4_lean_unit(h1, qa1, qb1, xa + 4096u, x, u + 32, sl0, sl1, hi));
        }
        return acc;
    }
    for (int u = lane; u < nu; u += 32, p += 1152, xa += 4096u) {
        const uint4 h = ldw16(p + oh), qa = ldw16(p + oa), qb = ldw16(p + ob);
        acc = __fadd_rn(acc, k4_lean_unit(h, qa, qb, xa, x, u, sl0, sl1, hi));
    }
    return acc;
}

// The repacked rows' bytes read in row_dot_k4_rp's pattern (no arithmetic; rd_rows' P 0 on the
// file's layout).
template <int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) rd_repacked(const u8* __restrict__ w, int rows, int rb, int cols,
                                                        const u8* __restrict__ xqg, float* y) {
    const int lane = threadIdx.x & 31, nw = gridDim.x * (NT / 32), nu = cols >> 6;
    for (int r = blockIdx.x * (NT / 32) + (threadIdx.x >> 5); r < rows; r += nw) {
        const u8* p = w + (size_t)r * rb;
        u32 acc = 0;
        for (int u = lane; u < nu; u += 32, p += 1152) {
            const uint4 h = *(const uint4*)(p + 16 * (lane >> 2)), qa = *(const uint4*)(p + 128 + 16 * lane),
                        qb = *(const uint4*)(p + 640 + 16 * lane);
            acc ^= h.x ^ h.w ^ qa.x ^ qa.y ^ qa.z ^ qa.w ^ qb.x ^ qb.y ^ qb.z ^ qb.w;
        }
        acc = __reduce_xor_sync(0xffffffffu, acc);
        if (lane == 0) y[r] = __uint_as_float(acc & 0x7fffff);
    }
    (void)xqg;
}

// R rows' sums a warp, unit by unit (lane u takes units u, u + 32, ...): unit(k, xr, u) is row
// k's value of unit u on the quants xr, each added in turn as row_dot_q16_one adds them (its bits).
template <int T, int R, class Unit>
__device__ __forceinline__ void rows_units(const Xq& x, int nu, int lane, float* acc, Unit unit) {
#pragma unroll
    for (int k = 0; k < R; k++) acc[k] = 0.f;
    for (int u = lane; u < nu; u += 32) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        float v[R];
#pragma unroll
        for (int k = 0; k < R; k++) v[k] = unit(k, xr, u);
#pragma unroll
        for (int k = 0; k < R; k++) acc[k] = __fadd_rn(acc[k], v[k]);
    }
}

// Rows r .. r + R (those below end) summed across the warp and stored by lane 0.
template <int R>
__device__ __forceinline__ void rows_store(const float* acc, int r, int end, int lane, float* y) {
#pragma unroll
    for (int k = 0; k < R; k++) {
        const float s = warp_sum(acc[k]);
        if (lane == 0 && r + k < end) y[r + k] = s;
    }
}

// R consecutive rows a warp straight from global memory (unit_q16's global-memory loads),
// their units side by side a lane so that every row's loads are in flight at once; each row
// summed as row_dot_q16_one sums it alone (the same bits). For short rows (the Qwen head's
// 896 columns: one unit a lane), where a warp a row has one row's bytes in flight.
template <int T, int NT, int MINB, int R>
__global__ void __launch_bounds__(NT, MINB) mv_rows_g(const u8* __restrict__ w, int rows, int rb, int cols,
                                                      const u8* __restrict__ xqg, float* y) {
    const Xq x = xq_to_smem(xqg, cols, NT);
    const int lane = threadIdx.x & 31, nw = gridDim.x * (NT / 32), nu = q16_units<T>(cols);
    for (int r = (blockIdx.x * (NT / 32) + (threadIdx.x >> 5)) * R; r < rows; r += nw * R) {
        float acc[R];
        rows_units<T, R>(x, nu, lane, acc, [&](int k, const int4* xr, int u) {
            return unit_q16<T, true>(w + (size_t)min(r + k, rows - 1) * rb, xr, x, u);
        });
        rows_store<R>(acc, r, rows, lane, y);
    }
}

// Q8_0 heads (`./mvbench q8`): the engine's head walk (matvec_wide_host's legacy branch: warp g
// takes a run of consecutive rows, two at a time, row_dot_q16_two) on the file's 34-byte blocks,
// against the same walk on a repacked copy of each row whose quants are 16-byte aligned:
// L = 0: unit u's 32 quant bytes at 32 u, the rows' f16 scales after them (2 u);
// L = 1: unit u's first 16 quant bytes at 16 u, its second at 16 (nu + u), then the scales;
// each row padded to 16 bytes (q8r_bytes). A unit then takes two 16-byte loads and one 2-byte
// load where the file's layout takes 11 (ldg_a2's ten aligned words and the scale), each of
// which touches the whole of the warp's 34-byte stride. R rows a warp at a time. The same
// arithmetic as unit_legacy<T_Q8_0>: the same bits.
__host__ __device__ static int q8r_bytes(int cols) { return ((cols / 32) * 34 + 15) / 16 * 16; }

template <int L>
__device__ __forceinline__ float unit_q8r(const u8* __restrict__ row, int nu, const int4* xr, const Xq& x, int u) {
    const float d = h2f(__ldg((const unsigned short*)(row + 32 * nu) + u));
    const uint4 a = __ldg((const uint4*)(row + (L == 0 ? 32 * u : 16 * u)));
    const uint4 b = __ldg((const uint4*)(row + (L == 0 ? 32 * u + 16 : 16 * (nu + u))));
    const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    return mul3(d, x.dx[u], (float)idot<8>(w, xr));
}

__global__ void repack_q8(const u8* __restrict__ src, u8* __restrict__ dst, int rows, int cols, int L) {
    const int nu = cols / 32, rb = nu * 34, rb2 = q8r_bytes(cols);
    const size_t n = (size_t)rows * nu;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / nu;
        const int u = (int)(i % nu);
        const u8* b = src + r * rb + 34 * u;
        u8* o = dst + r * rb2;
        o[32 * nu + 2 * u] = b[0];
        o[32 * nu + 2 * u + 1] = b[1];
        for (int k = 0; k < 32; k++) o[L == 0 ? 32 * u + k : k < 16 ? 16 * u + k : 16 * (nu + u) + k - 16] = b[2 + k];
    }
}

// P = -1: the file's layout (row_dot_q16_two, the engine's walk); P = 0 / 1: the repacked
// layouts, R rows at a time.
template <int P, int R, int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB) mv_q8_head(const u8* __restrict__ w, int rows, int rb, int cols,
                                                       const u8* __restrict__ xqg, float* y) {
    const Xq x = xq_to_smem(xqg, cols, NT);
    const int lane = threadIdx.x & 31, g = blockIdx.x * (NT / 32) + (threadIdx.x >> 5), nw = gridDim.x * (NT / 32);
    const int n = (rows + nw - 1) / nw, r0 = g * n, r1 = min(rows, r0 + n), nu = cols / 32;
    for (int r = r0; r < r1; r += R) {
        float acc[R];
        if constexpr (P < 0) {
            row_dot_q16_two<T_Q8_0>(w + (size_t)r * rb, w + (size_t)min(r + 1, r1 - 1) * rb, x, cols, lane, acc[0], acc[1]);
        } else {
            rows_units<T_Q8_0, R>(x, nu, lane, acc, [&](int k, const int4* xr, int u) {
                return unit_q8r<P>(w + (size_t)min(r + k, r1 - 1) * rb, nu, xr, x, u);
            });
        }
        rows_store<R>(acc, r, r1, lane, y);
    }
}

typedef void (*Kern)(const u8*, int, int, int, const u8*, float*);

struct Shape {
    const char* name;
    int ty, rows, cols;
};

static int row_bytes(int ty, int cols) {
    // Q8_0 blocks padded when built with -DMOLLA_LEGPAD, as the engine pads them (legacy_bytes).
    return ty == T_Q4_K ? cols / 256 * 144 : ty == T_Q6_K ? cols / 256 * Q6K_BYTES : cols / 32 * legacy_bytes<T_Q8_0>();
}

#include "pf.cuh"

int main(int argc, char** argv) {
    const bool only_read = argc > 1 && strcmp(argv[1], "read") == 0;
    // `repack`: the Q4_K matrices only, the lean walk and its read pattern on the file's layout
    // against the repacked one (a second pool holds the repacked copy of the first).
    const bool repack = argc > 1 && strcmp(argv[1], "repack") == 0;
    // `q8`: the small models' Q8_0 heads on the file's layout against the repacked ones (mv_q8_head).
    const bool q8 = argc > 1 && strcmp(argv[1], "q8") == 0;
    // `pf`: what asking L2 for a matrix while an attention-like launch keeps HBM idle saves.
    const bool pf = argc > 1 && strcmp(argv[1], "pf") == 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const size_t pool = (size_t)2 << 30;  // 2 GiB of weights, cycled
    u8* wpool;
    CK(cudaMalloc(&wpool, pool + 256));
    fill_weights(wpool, pool);
    u8* rpool = nullptr;
    if (repack) {
        CK(cudaMalloc(&rpool, pool + 256));
        repack_q4k<<<sms * 8, 256>>>((const uint4*)wpool, (uint4*)rpool, pool / 1152);
        CK(cudaDeviceSynchronize());
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
    // Milliseconds the launches `body` queues take, by events around them.
    auto timed = [&](auto&& body) {
        CK(cudaEventRecord(e0));
        body();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return ms;
    };
    if (q8) {
        // Each head's matrices cycled through the pool on the file's layout and (a second pool)
        // repacked, both layouts; outputs checked against matvec's bits on the first matrix.
        u8* qpool;
        CK(cudaMalloc(&qpool, pool + 256));
        const Shape heads[] = {{"qwen head 151936x896", T_Q8_0, 151936, 896}, {"smol head 49152x576", T_Q8_0, 49152, 576}};
        for (const Shape& sh : heads) {
            const int rb = row_bytes(T_Q8_0, sh.cols), rb2 = q8r_bytes(sh.cols);
            // mb2: the stride between matrices in both pools (a padded matrix, -DMOLLA_LEGPAD, is
            // the larger; the repacked layouts then read the file's blocks wrongly: other bits).
            const size_t mb = (size_t)sh.rows * rb, mb2 = std::max(mb, (size_t)sh.rows * rb2);
            const int nbuf = (int)(pool / mb2);
            bench_prep_xq<<<1, 128, sh.cols * 4 + xq_bytes(sh.cols)>>>(x, sh.cols, xq);
            MvArgs a;
            memset(&a, 0, sizeof a);
            a.seg[0] = MvSeg{};
            a.seg[0].rows = sh.rows;
            a.seg[0].row_bytes = rb;
            a.seg[0].ty = T_Q8_0;
            a.seg[0].y = yref;
            a.seg[0].w = wpool;
            a.nseg = 1;
            a.cols = sh.cols;
            a.x = x;
            a.lanes = 32;
            const int smem = sh.cols * 4 + xq_bytes(sh.cols);
            CK(cudaFuncSetAttribute(matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            matvec<<<std::min((sh.rows + 3) / 4, sms * 6), 128, smem>>>(a);
            CK(cudaDeviceSynchronize());
            std::vector<float> href(sh.rows), hy(sh.rows);
            CK(cudaMemcpy(href.data(), yref, sh.rows * 4, cudaMemcpyDeviceToHost));
            auto time = [&](const char* name, Kern k, const void* fn, const u8* base, size_t stride, int rbk, bool check) {
                int per;
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, 256, xq_bytes(sh.cols)));
                per = std::min(per, 4);
                const int grid = sms * per;
                bool same = true;
                if (check) {
                    k<<<grid, 256, xq_bytes(sh.cols)>>>(base, sh.rows, rbk, sh.cols, xq, y);
                    CK(cudaDeviceSynchronize());
                    CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
                    same = memcmp(hy.data(), href.data(), sh.rows * 4) == 0;
                }
                const float ms = timed([&] {
                    for (int i = 0; i < iters; i++)
                        k<<<grid, 256, xq_bytes(sh.cols)>>>(base + (size_t)((i + 1) % nbuf) * stride, sh.rows, rbk, sh.cols, xq, y);
                });
                cudaFuncAttributes fa;
                CK(cudaFuncGetAttributes(&fa, fn));
                printf("%-22s %-28s regs %3d %d/SM  %7.2f us  %6.0f GB/s (file bytes)  %s\n", sh.name, name, fa.numRegs, per,
                       ms * 1e3 / iters, mb * iters / (ms * 1e-3) / 1e9, !check ? "" : same ? "same bits" : "DIFFERENT BITS");
            };
            auto read = [&](const char* name, const u8* base, size_t bytes, size_t stride) {
                const float ms = timed([&] {
                    for (int i = 0; i < iters; i++)
                        peak_read<<<sms * 8, 256>>>((const int4*)(base + (size_t)((i + 1) % nbuf) * stride), bytes / 16, sink);
                });
                printf("%-22s %-28s                 %7.2f us\n", sh.name, name, ms * 1e3 / iters);
            };
#define Q8K(P, R) (Kern)(mv_q8_head<P, R, 256, 4>), (const void*)(mv_q8_head<P, R, 256, 4>)
            for (int L = 0; L < 2; L++) {
                for (int i = 0; i < nbuf; i++)
                    repack_q8<<<sms * 8, 256>>>(wpool + (size_t)i * mb2, qpool + (size_t)i * mb2, sh.rows, sh.cols, L);
                CK(cudaDeviceSynchronize());
                if (L == 0) {
                    read("read, file bytes", wpool, mb, mb2);
                    time("file layout (engine)", Q8K(-1, 2), wpool, mb2, rb, true);
                    time("split32 R2", Q8K(0, 2), qpool, mb2, rb2, true);
                    time("split32 R1", Q8K(0, 1), qpool, mb2, rb2, true);
                    time("split32 R4", Q8K(0, 4), qpool, mb2, rb2, true);
                } else {
                    time("split16 R2", Q8K(1, 2), qpool, mb2, rb2, true);
                    time("split16 R1", Q8K(1, 1), qpool, mb2, rb2, true);
                    time("split16 R4", Q8K(1, 4), qpool, mb2, rb2, true);
                    time("file layout (again)", Q8K(-1, 2), wpool, mb2, rb, true);
                    read("read, repacked bytes", qpool, mb2, mb2);
                }
            }
#undef Q8K
        }
        return 0;
    }
    if (pf) {
        pf_bench(wpool, pool, x, xq, y, sms, iters, timed);
        return 0;
    }
    Shape shapes[] = {{"qkv 6144x4096 Q4_K", T_Q4_K, 6144, 4096}, {"gate+up 28672x4096 Q4_K", T_Q4_K, 28672, 4096}, {"gate 14336x4096 Q4_K", T_Q4_K, 14336, 4096}, {"down 4096x14336 Q4_K", T_Q4_K, 4096, 14336},
                      {"wo 4096x4096 Q4_K", T_Q4_K, 4096, 4096},       {"down 4096x14336 Q6_K", T_Q6_K, 4096, 14336},
                      {"head 128256x4096 Q6_K", T_Q6_K, 128256, 4096}, {"qwen head 151936x896 Q8_0", T_Q8_0, 151936, 896}};
    for (const Shape& sh : shapes) {
        int rb = row_bytes(sh.ty, sh.cols);
        size_t mbytes = (size_t)sh.rows * rb;
        int nbuf = (int)std::max<size_t>(1, pool / mbytes);
        CK(cudaFuncSetAttribute(bench_prep_xq, cudaFuncAttributeMaxDynamicSharedMemorySize, sh.cols * 4 + xq_bytes(sh.cols)));
        bench_prep_xq<<<1, 128, sh.cols * 4 + xq_bytes(sh.cols)>>>(x, sh.cols, xq);
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
        // Times kernel k (fn) at nt threads a block with `sm` bytes of dynamic shared memory, at
        // most `cap` blocks an SM (0: as many as fit), and checks its bits against matvec's.
        auto run_smem = [&](const char* name, const void* fn, Kern k, int nt, int cap, int sm) {
            if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, sm) != cudaSuccess) {
                cudaGetLastError();
                printf("%-24s %-22s does not fit (%d bytes)\n", sh.name, name, sm);
                return;
            }
            int per;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, nt, sm));
            if (per == 0) {
                printf("%-24s %-22s no block fits\n", sh.name, name);
                return;
            }
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, fn));
            if (cap) per = std::min(per, cap);
            int grid = std::min(sms * per, (sh.rows + nt / 32 - 1) / (nt / 32));
            k<<<grid, nt, sm>>>(bufw(0), sh.rows, rb, sh.cols, xq, y);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
            bool same = memcmp(hy.data(), href.data(), sh.rows * 4) == 0;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) k<<<grid, nt, sm>>>(bufw(i + 1), sh.rows, rb, sh.cols, xq, y);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("%-24s %-22s regs %3d %d/SM grid %4d  %7.2f us  %6.0f GB/s  %s\n", sh.name, name, fa.numRegs, per, grid,
                   ms * 1e3 / iters, mbytes * iters / (ms * 1e-3) / 1e9, same ? "same bits" : "DIFFERENT BITS");
        };
        auto run = [&](const char* name, const void* fn, Kern k, int nt, int cap = 0) {
            run_smem(name, fn, k, nt, cap, xq_bytes(sh.cols));
        };
        // The bulk-copy variant: S slots of a row a warp after the input.
        auto run_bulk = [&](const char* name, const void* fn, Kern k, int nt, int S) {
            if (rb % 16 == 0) run_smem(name, fn, k, nt, 0, xq_bytes(sh.cols) + (nt / 32) * S * rb);
        };
#define RUNB(name, K, nt, S) run_bulk(name, (const void*)K, K, nt, S)
        if (repack) {
            // The repacked copy of the same bytes: the pools hold the same runs of 1152 bytes at
            // the same offsets (pool and matrices are whole runs), so bufw(i)'s matrix there is
            // the repacked bufw(i).
            if (sh.ty != T_Q4_K || sh.cols % 2048 != 0) continue;
            const ptrdiff_t delta = rpool - wpool;
            // walk: a matvec (its outputs must equal matvec's), else a read probe.
            auto run_rp = [&](const char* name, const void* fn, Kern k, bool repacked, bool walk) {
                int per;
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, 256, xq_bytes(sh.cols)));
                int grid = std::min(sms * per, (sh.rows + 7) / 8);
                const ptrdiff_t d = repacked ? delta : 0;
                k<<<grid, 256, xq_bytes(sh.cols)>>>(bufw(0) + d, sh.rows, rb, sh.cols, xq, y);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
                bool same = memcmp(hy.data(), href.data(), sh.rows * 4) == 0;
                CK(cudaEventRecord(e0));
                for (int i = 0; i < iters; i++) k<<<grid, 256, xq_bytes(sh.cols)>>>(bufw(i + 1) + d, sh.rows, rb, sh.cols, xq, y);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                printf("%-24s %-26s %d/SM  %7.2f us  %6.0f GB/s  %s\n", sh.name, name, per, ms * 1e3 / iters,
                       mbytes * iters / (ms * 1e-3) / 1e9, !walk ? "" : same ? "same bits" : "DIFFERENT BITS");
            };
            run_rp("lean, file layout", (const void*)mv_lean<256, 4>, mv_lean<256, 4>, false, true);
            run_rp("lean, repacked", (const void*)mv_lean<256, 4, true>, mv_lean<256, 4, true>, true, true);
            run_rp("read lean pattern, file", (const void*)rd_rows<0, 256, 4>, rd_rows<0, 256, 4>, false, false);
            run_rp("read lean pattern, repacked", (const void*)rd_repacked<256, 4>, rd_repacked<256, 4>, true, false);
            run_rp("lean, file layout (again)", (const void*)mv_lean<256, 4>, mv_lean<256, 4>, false, true);
            run_rp("lean, repacked (again)", (const void*)mv_lean<256, 4, true>, mv_lean<256, 4, true>, true, true);
            continue;
        }
        if (only_read) {
#define RUNR(name, K, nt) run(name, (const void*)K, K, nt)
            if (sh.ty == T_Q4_K) {
                RUNR("lean (matvec_wide) 4/SM", (mv_lean<256, 4>), 256);
                RUNR("lean 256 5/SM", (mv_lean<256, 5>), 256);
                RUNR("lean 256 6/SM", (mv_lean<256, 6>), 256);
                RUNR("lean 128 10/SM", (mv_lean<128, 10>), 128);
                RUNR("lean 128 12/SM", (mv_lean<128, 12>), 128);
                RUNR("lean 512 3/SM", (mv_lean<512, 3>), 512);
                RUNR("read lean pattern 4/SM", (rd_rows<0, 256, 4>), 256);
            }
            if (rb % 16 == 0) {
                RUNR("read lanes contig 4/SM", (rd_rows<1, 256, 4, 8>), 256);
                RUNR("read lanes contig 4/SM B4", (rd_rows<1, 256, 4, 4>), 256);
                RUNR("read lanes contig 2/SM B16", (rd_rows<1, 256, 2, 16>), 256);
            }
            RUNR("read flat 4/SM", (rd_flat<256, 4>), 256);
            continue;
        }
        if (sh.ty == T_Q4_K) {
            RUNB("bulk 256 S2", (mv_bulk<T_Q4_K, 256, 1, 2>), 256, 2);
            RUNB("bulk 256 S3", (mv_bulk<T_Q4_K, 256, 1, 3>), 256, 3);
            RUNB("bulk 256 S4", (mv_bulk<T_Q4_K, 256, 1, 4>), 256, 4);
            RUNB("bulk 128 S3", (mv_bulk<T_Q4_K, 128, 1, 3>), 128, 3);
            RUNB("bulk 128 S4", (mv_bulk<T_Q4_K, 128, 1, 4>), 128, 4);
            RUNB("bulk 512 S2", (mv_bulk<T_Q4_K, 512, 1, 2>), 512, 2);
        } else if (sh.ty == T_Q6_K) {
            RUNB("bulk 256 S2", (mv_bulk<T_Q6_K, 256, 1, 2>), 256, 2);
            RUNB("bulk 256 S3", (mv_bulk<T_Q6_K, 256, 1, 3>), 256, 3);
            RUNB("bulk 128 S4", (mv_bulk<T_Q6_K, 128, 1, 4>), 128, 4);
        }
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
            RUN("wide 256x4", (mv_warp<2, T_Q4_K, 256, 4>), 256);
            RUN("rows2 256x2", (mv_warp<0, T_Q4_K, 256, 2, 2>), 256);
            RUN("rows_g2 256x2", (mv_rows_g<T_Q4_K, 256, 2, 2>), 256);
            RUN("rows_g2 256x3", (mv_rows_g<T_Q4_K, 256, 3, 2>), 256);
            RUN("rows_g2 256x4", (mv_rows_g<T_Q4_K, 256, 4, 2>), 256);
            // One block of eight warps an SM (the persistent kernel's occupancy), rows in flight.
            RUNC("rows_g4 256 1/SM", (mv_rows_g<T_Q4_K, 256, 1, 4>), 256, 1);
            RUNC("rows_g6 256 1/SM", (mv_rows_g<T_Q4_K, 256, 1, 6>), 256, 1);
            RUNC("rows_g8 256 1/SM", (mv_rows_g<T_Q4_K, 256, 1, 8>), 256, 1);
            RUNC("rows_g4 384 1/SM", (mv_rows_g<T_Q4_K, 384, 1, 4>), 384, 1);
            RUN("lean 256x4", (mv_lean<256, 4>), 256);
        } else if (sh.ty == T_Q8_0) {
            // The Qwen2.5-0.5B head: the persistent kernel's occupancy (one block of 8 warps an
            // SM) against matvec_wide's (MOLLA_PK_HEAD=wide).
            RUNC("one 256 1/SM", (mv_warp<0, T_Q8_0, 256, 1>), 256, 1);
            RUNC("rows2 256 1/SM", (mv_warp<0, T_Q8_0, 256, 1, 2>), 256, 1);
            RUN("wide 256x4", (mv_warp<2, T_Q8_0, 256, 4>), 256);
            RUN("one 256x4", (mv_warp<0, T_Q8_0, 256, 4>), 256);
            RUN("rows_g2 256x4", (mv_rows_g<T_Q8_0, 256, 4, 2>), 256);
            RUN("rows_g2 256x3", (mv_rows_g<T_Q8_0, 256, 3, 2>), 256);
            RUN("rows_g3 256x3", (mv_rows_g<T_Q8_0, 256, 3, 3>), 256);
            RUN("rows_g4 256x2", (mv_rows_g<T_Q8_0, 256, 2, 4>), 256);
            RUN("rows_g4 256x3", (mv_rows_g<T_Q8_0, 256, 3, 4>), 256);
        } else {
            RUN("one 256x2", (mv_warp<0, T_Q6_K, 256, 2>), 256);
            RUN("one 256x4", (mv_warp<0, T_Q6_K, 256, 4>), 256);
            RUN("q6w 256x4", (mv_warp<2, T_Q6_K, 256, 4>), 256);
            RUN("rows_g2 256x3", (mv_rows_g<T_Q6_K, 256, 3, 2>), 256);
            RUN("rows_g2 256x2", (mv_rows_g<T_Q6_K, 256, 2, 2>), 256);
            RUNC("rows_g4 256 1/SM", (mv_rows_g<T_Q6_K, 256, 1, 4>), 256, 1);
            RUN("q6w 128x8", (mv_warp<2, T_Q6_K, 128, 8>), 128);
            RUN("q6w 256x2", (mv_warp<2, T_Q6_K, 256, 2>), 256);
            RUN("two 256x2", (mv_warp<1, T_Q6_K, 256, 2>), 256);
            RUN("rows2 256x2", (mv_warp<0, T_Q6_K, 256, 2, 2>), 256);
        }
    }
    return 0;
}
