// Latency of the persistent kernel's input preparation in one block (the GPU machine has nvcc,
// no Rust): quantize_q16_unsynced and quantize_q16_w (q16.cuh, the engine's code) on a row of
// the small models' widths, then the block barrier, timed with clock64 by thread 0 and averaged
// over many rounds; beside it the bare barrier (and four, and three named barriers of 128 threads
// before it) and a bare shared load; then the row dots of a matvec step's busiest block on a
// quantized row (Q4_1 rows in shared memory, the shapes of SmolLM2's and Qwen's steps), warm and
// cold (COLD below), and of Q8_0 and Q5_0 rows (built with -DMOLLA_X_A2WORDS: their words read as
// MOLLA_KDEFS=A2WORDS reads them), and of Q4_1 rows in a split layout (headers, then 16-byte
// aligned quants: SPLIT). (Rows expanded as session 36's MOLLA_KDEFS=X8 expanded them: removed
// with it; the engine measured it 16-20% slower.)
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o qbench scripts/qbench/qbench.cu && ./qbench
//   (and -DMOLLA_X_A2WORDS -o qbench-a2 for the word loads; -DMOLLA_X_QSKIP -o qbench-q for
//   MOLLA_KDEFS=QSKIP's quantization: warps without a block of the row skipping the trip. 64
//   values: the attention fold's head, 128 the 8B's. QMAGIC, rounding by an f32 add, was removed
//   in session 46 with the division form it rounded: the scale is a power of two since)
//
// Session 34 (H200, 1980 MHz), SM cycles a round at 256 / 384 threads: barrier 209-212 / 234, a
// shared load at a computed index and barrier 430-434 / 468-478 (most of it the index's integer
// modulo, since taken out), plain 844-895 / 978-1028, norm 955-1071 / 1105-1230; with approximate
// divisions and without the sums (other bits) 504-564 / 539-610. Session 35, 576 / 896 / 1536
// values: barrier 175-178 / 233-238, loadonly 215-221 / 314-325, plain 802, 782, 820 / 963, 975,
// 1010, norm 907, 962, 1041 / 1141-1262; FASTDIV (q16_block's divisions as div.rn's fast path
// without its range check and branch, the maximum as a tree; the same bits on every divisor,
// checked on the device) 822, 810, 856 / 991-1047: no faster, so removed (its code: 4ccab15).
// Row dots (session 35, same units, 256 / 384 threads, with the barrier's ~150-180): SmolLM2 q/k/v
// 8 rows of 576 two a warp 766 / 760, one a warp 650 / 705; gate/up 12 pairs 1679 / 1115; down 5
// rows of 1536 955 / 1009; Qwen q/k/v 10 rows of 896 885 / 877, gate/up 37 pairs 4270 / 3998,
// down 7 rows of 4864 1343 / 1409. The trace's rows phases (session 34) are 1.4-4x these.
// Session 42 (H100 80GB HBM3), the cold columns at last: after 256 KB of other code (COLD) a bare
// barrier takes 858 cycles against 271 warm, the q/k/v rows two a warp 2027 / 2038 against 927 /
// 947, a plain trip 1928 against 864; after 32 KB (COLDS) 350, 1123, 955. The sweep (FLUSHK, 384
// threads: barrier / q/k/v rows / gate/up pairs) after 0, 16, 48, 64, 80, 96, 112, 128, 160, 192
// KB of code: 324 / 977 / 1345, 407 / 1111 / 1483, 615 / 1197 / 1783, 822 / 1773 / 2561, 417 /
// 1297 / 1495, 970 / 2140 / 2724, 389 / 1143 / 1522, then ~876 / ~2000 / ~2580 from 128 KB on:
// not monotonic below 128 KB (where the flush lies against the timed code matters: a
// set-associative cache), everything fetched again from 128 KB.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "../../crates/cuda/kernels/common.cuh"
#include "../../crates/cuda/kernels/q16.cuh"
#include "../../crates/cuda/kernels/q16_rows.cuh"

#include "../cuda_check.h"

enum { BARRIER = 0, PLAIN = 1, NORM = 2, LOADONLY = 3, BARRIER4 = 4, NAMED4 = 5, ROWS2 = 6, ROWS1 = 7, PAIRS = 8 };

// The persistent kernel's row dots on a row quantized once (outside the timing), against Q4_1 rows
// in shared memory: ROWS2 two rows a warp (rows_dot_q16<2>, as a matvec step with more rows than
// warps), ROWS1 one a warp, PAIRS a gate/up pair a warp (two matrices' rows, silu(g) * u); each
// warp's sums by warp_sum and stored by lane 0 into shared memory, as pk_matvec's rows.
// SPLIT (or'd into a rows variant, Q4_1 only): the rows laid out as the staging could write them,
// each row's block headers (d, m: a word a unit) first, then its quants (16 bytes a unit, 16-byte
// aligned), so a unit takes one 4-byte and one 16-byte load instead of a 2-byte, a 2-byte and four
// 4-byte ones (unit_legacy's). The same arithmetic as unit_legacy<T_Q4_1>.
#define SPLIT 0x200
__host__ __device__ constexpr int split_hdr(int nu) { return (4 * nu + 15) & ~15; }
__host__ __device__ constexpr int split_row(int nu) { return split_hdr(nu) + 16 * nu; }
template <int R>
__device__ __forceinline__ void rows_dot_split(const u8* const* w, int nr, const Xq& x, int cols, int lane, float* acc) {
    const int nu = cols / 32;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int u = lane; u < nu; u += 32) {
        int4 xr[8];
        load_xu<T_Q4_1>(x, u, xr);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= nr) continue;
            const u32 dm = ((const u32*)w[r])[u];
            const uint4 q = ((const uint4*)(w[r] + split_hdr(nu)))[u];
            const u32 qs[4] = {q.x, q.y, q.z, q.w};
            u32 wv[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                wv[k] = qs[k] & 0x0f0f0f0fu;
                wv[k + 4] = (qs[k] >> 4) & 0x0f0f0f0fu;
            }
            const int sdot = idot<8>(wv, xr);
            float v = mul3(h2f((u16)dm), x.dx[u], (float)sdot);
            v = __fadd_rn(v, __fmul_rn(h2f((u16)(dm >> 16)), x.sx[u]));
            acc[r] = __fadd_rn(acc[r], v);
        }
    }
}

template <int NT, int T, bool SPL = false>
__device__ __forceinline__ void rows_work(int variant, const u8* wq, int nrows, const Xq& xq, int cols, float* out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t rb = SPL ? (size_t)split_row(cols / 32) : (size_t)(cols / 32) * legacy_bytes<T>();
    if (variant == ROWS2) {
        for (int r = 2 * warp; r < nrows; r += 2 * (NT / 32)) {
            const u8* w2[2] = {wq + r * rb, wq + (r + 1) * rb};
            float acc[2];
            if (SPL) rows_dot_split<2>(w2, min(2, nrows - r), xq, cols, lane, acc);
            else rows_dot_q16<T, 2>(w2, min(2, nrows - r), xq, cols, lane, 32, acc);
            acc[0] = warp_sum(acc[0]);
            acc[1] = warp_sum(acc[1]);
            if (lane < 2) out[r + lane] = lane ? acc[1] : acc[0];
        }
    } else if (variant == ROWS1) {
        for (int r = warp; r < nrows; r += NT / 32) {
            const u8* w1[1] = {wq + r * rb};
            float acc[1];
            if (SPL) rows_dot_split<1>(w1, 1, xq, cols, lane, acc);
            else rows_dot_q16<T, 1>(w1, 1, xq, cols, lane, 32, acc);
            acc[0] = warp_sum(acc[0]);
            if (lane == 0) out[r] = acc[0];
        }
    } else {
        // nrows pairs: gate row r at r, up row r at nrows + r.
        for (int r = warp; r < nrows; r += NT / 32) {
            const u8* w2[2] = {wq + r * rb, wq + (nrows + r) * rb};
            float gu[2];
            if (SPL) rows_dot_split<2>(w2, 2, xq, cols, lane, gu);
            else rows_dot_q16<T, 2>(w2, 2, xq, cols, lane, 32, gu);
            float g = warp_sum(gu[0]), u = warp_sum(gu[1]);
            if (lane == 0) out[r] = g / (1.f + __expf(-g)) * u;
        }
    }
}

// COLD (or'd into a variant): before each round every thread runs ~16K distinct instructions
// (256 KB of code, more than an SM's instruction caches hold), so the timed code is fetched again
// as the persistent kernel's steps fetch theirs after the other steps' code ran. COLDS: ~2K
// (32 KB, about a third of the persistent kernel's code), so that a cost under COLDS as well
// says the innermost instruction caches miss, one under COLD only the SM's larger one.
#define COLD 0x100
#define COLDS 0x400
template <int N>
__device__ __noinline__ float flush_icache(float v) {
#pragma unroll
    for (int i = 0; i < N; i++) v = __fmaf_rn(v, 1.0f + (float)(i + 1) * 0x1p-22f, (float)(i & 7));
    return v;
}

template <int NT, int T = T_Q4_1>
__global__ void __launch_bounds__(NT) qbench(const float* x, const float* w, int cols, int rounds, int variant,
                                             long long* out, int* sink, const u8* wg, int nrows) {
    const bool cold = (variant & COLD) != 0, colds = (variant & COLDS) != 0, split = (variant & SPLIT) != 0;
    const int variant_all = variant;
    variant &= 0xff;
    float fl = 0.f;
    extern __shared__ float4 sm4[];
    float* xs = (float*)sm4;
    float* nw = xs + cols;
    float* raw = nw + cols;
    u8* xq = (u8*)(raw + cols);
    u8* wq = xq + xq_bytes(cols);  // the rows variants' weights (2 nrows rows of Q4_1)
    const int wbytes = 2 * nrows * (split ? split_row(cols / 32) : (cols / 32) * legacy_bytes<T>());
    float* ro = (float*)(wq + wbytes + 16);
    for (int i = threadIdx.x; i < cols; i += NT) xs[i] = x[i], nw[i] = w[i];
    for (int i = threadIdx.x; i < wbytes; i += NT) wq[i] = wg[i];
    __syncthreads();
    const bool rows = variant >= ROWS2;
    if (rows) {
        quantize_q16_unsynced<NT>(xs, cols, xq);
        __syncthreads();
    }
    const Xq xqv = xq_at(xq, cols);
    long long total = 0;
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        // A fresh row each round, as the pollers leave it (written, then a barrier).
        if (!rows)
            for (int i = threadIdx.x; i < cols; i += NT) xs[i] = x[i] * (1.f + r * 1e-7f);
        if (cold) fl += flush_icache<16384>((float)r);
        if (colds) fl += flush_icache<2048>((float)r);
        // FLUSHK (bits 12..19: KB of code run before the round, 16 bytes an instruction).
        switch ((variant_all >> 12) & 0xff) {
            case 16: fl += flush_icache<1024>((float)r); break;
            case 48: fl += flush_icache<3072>((float)r); break;
            case 64: fl += flush_icache<4096>((float)r); break;
            case 80: fl += flush_icache<5120>((float)r); break;
            case 96: fl += flush_icache<6144>((float)r); break;
            case 112: fl += flush_icache<7168>((float)r); break;
            case 128: fl += flush_icache<8192>((float)r); break;
            case 160: fl += flush_icache<10240>((float)r); break;
            case 192: fl += flush_icache<12288>((float)r); break;
            default: break;
        }
        __syncthreads();
        long long t0 = clock64();
        if (rows && split) rows_work<NT, T, true>(variant, wq, nrows, xqv, cols, ro);
        else if (rows) rows_work<NT, T>(variant, wq, nrows, xqv, cols, ro);
        else if (variant == PLAIN) quantize_q16_unsynced<NT>(xs, cols, xq);
        else if (variant == NORM) quantize_q16_w<NT>(xs, cols, xq, nw, raw);
        else if (variant == LOADONLY) acc += __float_as_int(xs[min((int)threadIdx.x, cols - 1)]);
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
        acc += ((const int*)xq)[threadIdx.x % 16] + (rows ? __float_as_int(ro[threadIdx.x % 4]) : 0);
    }
    if (threadIdx.x == 0) *out = total / rounds;
    if (acc == 0x12345678 || fl == 1.2345f) *sink = acc;
}

template <int NT, int T = T_Q4_1>
long long run(const float* x, const float* w, int cols, int variant, long long* d_out, int* sink, const u8* wg = nullptr,
             int nrows = 0) {
    const int rounds = 2000;
    size_t smem = 3 * cols * sizeof(float) + xq_bytes(cols) + 64 + (size_t)2 * nrows * ((cols / 32) * 34 + 16) + 16 + 4 * nrows;
    if (smem > 48 * 1024) CK(cudaFuncSetAttribute(qbench<NT, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    qbench<NT, T><<<1, NT, smem>>>(x, w, cols, rounds, variant, d_out, sink, wg, nrows);
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
    for (int cols : {64, 128, 576, 896, 1536})
        for (int v : {BARRIER, BARRIER4, NAMED4, LOADONLY, PLAIN, NORM})
            printf("| %s | %d | %lld | %lld |\n", names[v], cols, run<256>(x, w, cols, v, d_out, sink),
                   run<384>(x, w, cols, v, d_out, sink));
    // Row dots (Q4_1 rows whose scale and minimum are 1, random quants), shapes of the persistent
    // kernel's busiest block: SmolLM2 q/k/v 8 rows of 576, gate/up 12 pairs of 576, down 5 rows of
    // 1536; Qwen q/k/v 10 rows of 896, gate/up 37 pairs of 896, down 7 rows of 4864.
    std::vector<u8> hq((size_t)2 * 40 * (4864 / 32) * 34);
    unsigned rs = 1;
    for (size_t i = 0; i < hq.size(); i++) rs = rs * 1664525u + 1013904223u, hq[i] = (u8)(rs >> 24);
    for (size_t b = 0; b + 20 <= hq.size(); b += 20) hq[b] = 0, hq[b + 1] = 0x3c, hq[b + 2] = 0, hq[b + 3] = 0x3c;
    u8* wg;
    CK(cudaMalloc(&wg, hq.size()));
    CK(cudaMemcpy(wg, hq.data(), hq.size(), cudaMemcpyHostToDevice));
    printf("\n| rows (Q4_1) | cols | rows | 256 threads | 384 threads | cold, 256 | cold, 384 | 32 KB cold, 256 |\n|---|---|---|---|---|---|---|---|\n");
    struct Shape {
        int v, cols, rows;
        const char* name;
    };
    for (Shape sh : {Shape{ROWS2, 576, 8, "two a warp"}, Shape{ROWS1, 576, 8, "one a warp"}, Shape{PAIRS, 576, 12, "pairs"},
                     Shape{ROWS1, 1536, 5, "one a warp"}, Shape{ROWS2, 896, 10, "two a warp"}, Shape{PAIRS, 896, 37, "pairs"},
                     Shape{ROWS1, 4864, 7, "one a warp"}})
        printf("| %s | %d | %d | %lld | %lld | %lld | %lld | %lld |\n", sh.name, sh.cols, sh.rows,
               run<256>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows), run<384>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows),
               run<256>(x, w, sh.cols, sh.v | COLD, d_out, sink, wg, sh.rows),
               run<384>(x, w, sh.cols, sh.v | COLD, d_out, sink, wg, sh.rows),
               run<256>(x, w, sh.cols, sh.v | COLDS, d_out, sink, wg, sh.rows));
    printf("\n| cold (code fetched again) | cols | 256 threads | 384 threads | 32 KB cold, 256 |\n|---|---|---|---|---|\n");
    for (int cols : {576, 1536})
        for (int v : {BARRIER, LOADONLY, PLAIN, NORM})
            printf("| %s | %d | %lld | %lld | %lld |\n", names[v], cols, run<256>(x, w, cols, v | COLD, d_out, sink),
                   run<384>(x, w, cols, v | COLD, d_out, sink), run<256>(x, w, cols, v | COLDS, d_out, sink));
    // How much code the SM keeps (session 42): a bare barrier and SmolLM2's q/k/v rows after N KB
    // of code ran (FLUSHK): the cost climbs once N passes what an instruction cache holds.
    printf("\n| code run before (KB) | barrier, 384 | q/k/v rows two a warp, 384 | gate/up pairs, 384 |\n|---|---|---|---|\n");
    for (int kb : {0, 16, 48, 64, 80, 96, 112, 128, 160, 192})
        printf("| %d | %lld | %lld | %lld |\n", kb, run<384>(x, w, 576, BARRIER | kb << 12, d_out, sink),
               run<384>(x, w, 576, ROWS2 | kb << 12, d_out, sink, wg, 8), run<384>(x, w, 576, PAIRS | kb << 12, d_out, sink, wg, 12));
    // Q4_1 rows in the split layout (SPLIT), warm: against the first table's.
    printf("\n| rows, Q4_1 split | cols | rows | 256 threads | 384 threads |\n|---|---|---|---|---|\n");
    for (Shape sh : {Shape{ROWS1, 576, 8, "one a warp"}, Shape{PAIRS, 576, 12, "pairs"}, Shape{ROWS1, 1536, 5, "one a warp"},
                     Shape{ROWS2, 896, 10, "two a warp"}, Shape{PAIRS, 896, 37, "pairs"}})
        printf("| %s | %d | %d | %lld | %lld |\n", sh.name, sh.cols, sh.rows,
               run<256>(x, w, sh.cols, sh.v | SPLIT, d_out, sink, wg, sh.rows),
               run<384>(x, w, sh.cols, sh.v | SPLIT, d_out, sink, wg, sh.rows));
    // The 2-byte aligned formats (their blocks' scales random bits: the timing is the same), on
    // SmolLM2 Q8_0's and Qwen's shapes; build with -DMOLLA_X_A2WORDS for MOLLA_KDEFS=A2WORDS's
    // shared-memory word loads.
    printf("\n| rows | cols | rows | Q8_0, 256 | Q8_0, 384 | Q5_0, 256 | Q5_0, 384 |\n|---|---|---|---|---|---|---|\n");
    for (Shape sh : {Shape{ROWS1, 576, 8, "one a warp"}, Shape{PAIRS, 576, 12, "pairs"}, Shape{ROWS1, 1536, 5, "one a warp"},
                     Shape{ROWS2, 896, 10, "two a warp"}, Shape{PAIRS, 896, 37, "pairs"}})
        printf("| %s | %d | %d | %lld | %lld | %lld | %lld |\n", sh.name, sh.cols, sh.rows,
               run<256, T_Q8_0>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows),
               run<384, T_Q8_0>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows),
               run<256, T_Q5_0>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows),
               run<384, T_Q5_0>(x, w, sh.cols, sh.v, d_out, sink, wg, sh.rows));
    return 0;
}
