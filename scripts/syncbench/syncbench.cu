// Hand-over microbenchmark for the GPU machine: the latency floor of one inter-block "step" of a
// persistent decode kernel (crates/cuda/kernels/persistent_steps.cuh), by hand-over protocol.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/syncbench scripts/syncbench/syncbench.cu && /tmp/syncbench [S]
//
// A kernel of G blocks (256 threads, one block an SM, all co-resident) runs a chain of S steps
// (default 2000) over a vector of N floats: step s waits for the whole of step s-1's vector, copies
// it into shared memory, and block b writes rows [N*b/G, N*(b+1)/G) of step s's vector:
//   out[r] = in[(r*5 + s) % N] + (1 + r % 8)
// (5 is coprime to every N used, so each step is a permutation: a stale value read anywhere
// reaches the final vector; values are integers below 2^24, so the float sums are exact and the
// host's simulation must match bit for bit). Step 0 reads a plain init vector; step s writes
// buffer s % 2 and reads buffer (s-1) % 2. Launch e (1, 2, ...) of a config uses tags
// e*S + s + 1 and counter targets e*G, so a launch never takes an earlier launch's words as its
// own; the buffers, counters and flags are zeroed once a config.
//
// Buffer reuse (2 buffers, every variant): block b overwrites buffer s%2 (step s-2's vector) only
// after it saw all of step s-1's vector, and each block wrote its share of that only after
// finishing its load of step s-2's vector (its loads were in shared memory before a barrier).
// Likewise a flag word of step s-2 is overwritten only after every block finished waiting on it.
//
// SYNCBENCH_ONLY=tagged_batch,tagged_r4 runs only the variants named.
//
// Prints a markdown table, us a step = median of 5 launches (after 2 warm-ups, cudaEvent) / S;
// check = every launch's final vector (and tags) equal the host's, and no wait timed out. Every
// wait gives up after 1 s (globaltimer) or 2^26 polls, setting an error word. Exits 1 on a failure.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <string>
#include <cuda_runtime.h>

// The engine's types and its global-timer and relaxed / acquire loads.
#include "../../crates/cuda/kernels/common.cuh"
#include "../../crates/cuda/kernels/q16.cuh"
#include "../../crates/cuda/kernels/q16_rows.cuh"
#include "../../crates/cuda/kernels/persistent_steps.cuh"

#include "../cuda_check.h"

#define NT 256
#define MAXN 2048  // tagged loads: at most 4 pairs a thread
#define TIMEOUT_NS 1000000000ull

// Variants: tagged words {value, tag} polled a pair at a time (volatile, as the engine before
// c5d12f2; relaxed at GPU scope), or all of a thread's untagged pairs reloaded in each poll
// (tagged_batch, as the engine since); one counter a step; a flag a block; a grid barrier.
// TAGGED_NOWORK (only one warp stores a block's share) is left out: a block's share is
// at most 47 rows here, stored by threads lo..hi-1, so warp 0 (and part of warp 1 at N=1536,
// G=33) already does every store.
// tagged_rR: tagged_batch with each value stored into R copies of the vector, block b reading copy
// b % R (R times the stores, a copy's lines polled by a R-th of the grid: is a step's wait the
// L2 serving one line to every SM?). Session 35 (H200, 132 blocks, N = 576 / 896 / 1536, us a
// step, two runs alike to 0.003): tagged_batch 1.044 / 1.023 / 1.012, r2 0.957 / 0.984 / 0.940,
// r4 0.958 / 0.937 / 0.936, r8 1.017 / 1.002 / 1.031; at 66 blocks every variant 0.85-0.94.
// tagged_stagD (session 44): tagged_batch with two polls of a thread's pairs in
// flight, the second issued D SM cycles after the first and each reissued as soon as it is
// checked, so that the pairs are looked at about every half round trip instead of every round trip
// (a pair written just after a poll left is seen ~RTT/4 later on average, not ~RTT/2; twice the
// polls' L2 traffic). D = 80, 160 and 320 cycles (session 35's l2probe: a round trip is 278-309).
// Session 45 (H100, 132 blocks): 1.22-1.37 us a step against tagged_batch's 1.15-1.16, slower.
enum {
    TAGGED,
    TAGGED_RELAXED,
    TAGGED_BATCH,
    TAGGED_R2,
    TAGGED_R4,
    TAGGED_R8,
    TAGGED_STAG80,
    TAGGED_STAG160,
    TAGGED_STAG320,
    TAGGED_IN,
    TAGGED3,
    REDUCE1,
    REDUCE4,
    REDUCE16,
    FOLD2,
    FOLD3,
    FOLD9,
    FOLD14,
    COUNTER,
    FLAGS,
    GRIDBAR,
    NVAR
};
static const char* vname[NVAR] = {"tagged",         "tagged_relaxed", "tagged_batch",   "tagged_r2",
                                  "tagged_r4",      "tagged_r8",      "tagged_stag80",  "tagged_stag160",
                                  "tagged_stag320", "tagged_in",      "tagged3",        "reduce1",        "reduce4",        "reduce16",
                                  "fold2",          "fold3",          "fold9",          "fold14",
                                  "counter",        "flags",          "gridbar"};
__host__ __device__ constexpr int reps(int v) { return v == TAGGED_R2 ? 2 : v == TAGGED_R4 ? 4 : v == TAGGED_R8 ? 8 : 1; }
__host__ __device__ constexpr int stagger(int v) {
    return v == TAGGED_STAG80 ? 80 : v == TAGGED_STAG160 ? 160 : v == TAGGED_STAG320 ? 320 : 0;
}
// reduceK: every block adds its part of every value of the step into one counted word a value
// (red.add.u64: the value in the low bits, 1 << 56 an add), K words apart; readers poll each
// word until it counts every block (the hand-over a down projection folded into gate/up would
// need: every block holds a slice of down's input, so every block adds into every output row).
// Each launch zeroes its RED_STEPS rows first. Session 45 (H100, 132 blocks, N = 576): reduce1
// 2.96 us a step, reduce4 3.87, reduce16 3.27, against tagged_batch's 1.15.
// foldC (session 47): the folded wo's hand-over with C adds a word (C heads): the blocks in C
// groups (block b in group b % C), each group's blocks sharing the rows out, so each word takes
// one add a group (group 0 adds the value, the others 0) and readers poll until it counts C.
// Qwen's fold is C = 14, SmolLM2's 9; a block attending a whole kv group would make them 2 and 3.
__host__ __device__ constexpr int fold_c(int v) { return v == FOLD2 ? 2 : v == FOLD3 ? 3 : v == FOLD9 ? 9 : v == FOLD14 ? 14 : 0; }
__host__ __device__ constexpr int red_stride(int v) {
    return v == REDUCE1 || fold_c(v) ? 1 : v == REDUCE4 ? 4 : v == REDUCE16 ? 16 : 0;
}
__host__ __device__ constexpr bool is_reduce(int v) { return red_stride(v) > 0; }
#define RED_STEPS 400  // the reduce variants' steps a launch (one accumulator row a step)
__host__ __device__ constexpr bool batched(int v) { return v == TAGGED_BATCH || reps(v) > 1 || stagger(v) > 0; }
__host__ __device__ constexpr bool is_tagged(int v) { return v == TAGGED || v == TAGGED_RELAXED || batched(v); }
// tagged_in (session 47): each value one 4-byte word, its tag in the two lowest mantissa bits
// (1 + the step's tag % 3: never 0, the zeroed buffers', and never step s - 2's, which the
// buffer held before), the value those bits cleared (f32 rounded to 21 bits of mantissa in an
// engine; the bench's integers below 2^21 have them 0). A 16-byte load polls four values, not
// two, and a step's vector is half the bytes: is a hand-over bound by the bytes the grid polls?
__host__ __device__ constexpr u32 tag3(u32 tag) { return 1u + tag % 3u; }
// tagged3 (session 47): three f32 values and the tag in one 16-byte word {v0, v1, v2, tag},
// stored whole by one thread (st.v4; the hardware writes an aligned 16 bytes at once, as the
// engine's 16-byte polls already assume), polled a word a 16-byte load: 1.5 values for each
// of tagged_batch's, exact f32. Blocks own whole words (rows in threes); an engine would gather
// a word's three rows in shared memory first (not timed here).
#define G3 3
#define MAXR 8

struct Args {
    u64* ll;            // tagged: 2 buffers of N words {f32 bits, tag}
    float* plain;       // others: 2 buffers of N floats (the same memory as ll)
    const float* init;  // step 0's input
    u64* acc;           // reduceK: RED_STEPS rows of N counted words, K words apart
    u32* ctr;           // counter: one a step (S words); gridbar: ctr[S]
    u32* flags;         // flags: 2 buffers of G words
    u32* err;           // 1 + step of the first wait that gave up
    int* smid;          // the SM of each block
    int n, steps;
    u32 epoch;          // 1, 2, ... for the launches of a config
};

// Two tagged words {value, tag, value, tag} (16-byte aligned), one load: volatile as the engine's
// ld_ll2, or relaxed at gpu scope. (PTX models a vector access as per-element accesses either
// way; the hardware does an aligned 16-byte access whole, which the engine relies on.)
template <int V>
__device__ __forceinline__ uint4 ld2(const u64* p) {
    uint4 v;
    if (V != TAGGED)
        asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    else
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}

template <int V>
__device__ __forceinline__ void st1(u64* p, float v, u32 tag) {
    if (V != TAGGED)
        asm volatile("st.relaxed.gpu.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(tag) : "memory");
    else
        asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(tag) : "memory");
}

// One counted word (reduceK), relaxed at GPU scope.
__device__ __forceinline__ u64 ld_relaxed_u64(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Whether a wait of step `step` begun at t0 must stop (another block's error, 1 s, or 2^26 polls).
__device__ __forceinline__ bool give_up(u32* err, u64 t0, u32 it, int step) {
    if (*(volatile u32*)err != 0u) return true;
    bool out = global_ns() - t0 > TIMEOUT_NS || it > (1u << 26);
    if (out) atomicCAS(err, 0u, (u32)step + 1u);
    return out;
}

// Polls the pair at p until both words carry `tag`, as the engine's pk_spin.
template <int V>
__device__ __noinline__ bool spin_ll(const u64* p, u32 tag, int step, u32* err, uint4& v) {
    u64 t0 = global_ns();
    for (u32 it = 1;; it++) {
        v = ld2<V>(p);
        if (v.y == tag && v.w == tag) return true;
        if ((it & 63) == 0 && give_up(err, t0, it, step)) return false;
    }
}

// As pk_load_ll since c5d12f2: every poll reloads all of the thread's pairs not yet tagged at
// once (relaxed at GPU scope); tagged_batch. With D > 0 (tagged_stagD), two polls in flight: poll
// A, D SM cycles later poll B; then in turn: check A's pairs still pending and reissue A for those
// left, the same for B.
template <int V, int D = stagger(V)>
__device__ __forceinline__ bool load_ll_batch(const u64* src, float* x, int n, u32 tag, int step, u32* err) {
    const int np = n >> 1;
    constexpr int K = MAXN / 2 / NT;
    u32 pend = 0;
    for (int k = 0; k < K; k++)
        if (threadIdx.x + k * NT < np) pend |= 1u << k;
    uint4 va[K], vb[K];
    auto issue = [&](uint4* v) {
#pragma unroll
        for (int k = 0; k < K; k++)
            if ((pend >> k) & 1) v[k] = ld2<V>(src + 2 * (threadIdx.x + k * NT));
    };
    auto check = [&](const uint4* v) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            int i = threadIdx.x + k * NT;
            if (((pend >> k) & 1) && v[k].y == tag && v[k].w == tag) {
                x[2 * i] = __uint_as_float(v[k].x);
                x[2 * i + 1] = __uint_as_float(v[k].z);
                pend &= ~(1u << k);
            }
        }
    };
    if (!pend) return true;
    issue(va);
    if (D > 0) {
        const long long c0 = clock64();
        while (clock64() - c0 < D) {
        }
        issue(vb);
    }
    u64 t0 = 0;
    for (u32 it = 1;; it++) {
        check(va);
        if (!pend) return true;
        issue(va);
        if (D > 0) {
            check(vb);
            if (!pend) return true;
            issue(vb);
        }
        if (it == 1) t0 = global_ns();
        if ((it & 63) == 0 && give_up(err, t0, it, step)) return false;
    }
}

// Polls the thread's 16-byte words i = threadIdx.x + k * NT < nw of src (relaxed), every word
// not yet taken reloaded at once (as tagged_batch), until take(word, i) took each.
template <int K, typename Take>
__device__ __forceinline__ bool poll_words(const uint4* src, int nw, int step, u32* err, Take take) {
    u32 pend = 0;
    for (int k = 0; k < K; k++)
        if (threadIdx.x + k * NT < nw) pend |= 1u << k;
    u64 t0 = 0;
    for (u32 it = 1; pend; it++) {
        uint4 v[K];
#pragma unroll
        for (int k = 0; k < K; k++)
            if ((pend >> k) & 1) v[k] = ld2<TAGGED_BATCH>((const u64*)(src + threadIdx.x + k * NT));
#pragma unroll
        for (int k = 0; k < K; k++)
            if (((pend >> k) & 1) && take(v[k], (int)threadIdx.x + k * NT)) pend &= ~(1u << k);
        if (it == 1) t0 = global_ns();
        if (pend && (it & 63) == 0 && give_up(err, t0, it, step)) return false;
    }
    return true;
}

// tagged_in's poll: four words a 16-byte load, each checked on its own.
__device__ __forceinline__ bool load_in_batch(const u32* src, float* x, int n, u32 tag, int step, u32* err) {
    const u32 t3 = tag3(tag);
    return poll_words<MAXN / 4 / NT>((const uint4*)src, n >> 2, step, err, [&](const uint4& v, int i) {
        if ((v.x & 3u) != t3 || (v.y & 3u) != t3 || (v.z & 3u) != t3 || (v.w & 3u) != t3) return false;
        x[4 * i] = __uint_as_float(v.x & ~3u);
        x[4 * i + 1] = __uint_as_float(v.y & ~3u);
        x[4 * i + 2] = __uint_as_float(v.z & ~3u);
        x[4 * i + 3] = __uint_as_float(v.w & ~3u);
        return true;
    });
}

// tagged3's poll: a word's three values once it carries the tag.
__device__ __forceinline__ bool load3_batch(const uint4* src, float* x, int n, u32 tag, int step, u32* err) {
    return poll_words<(MAXN / G3 + NT) / NT>(src, (n + G3 - 1) / G3, step, err, [&](const uint4& v, int i) {
        if (v.w != tag) return false;
        x[G3 * i] = __uint_as_float(v.x);
        if (G3 * i + 1 < n) x[G3 * i + 1] = __uint_as_float(v.y);
        if (G3 * i + 2 < n) x[G3 * i + 2] = __uint_as_float(v.z);
        return true;
    });
}

// The tagged vector into shared memory, as pk_load_ll was before c5d12f2: all of a thread's
// pair loads issued, then a poll of the pairs not yet tagged, one pair at a time. No barrier
// here (the caller's follows).
template <int V>
__device__ __forceinline__ bool load_ll(const u64* src, float* x, int n, u32 tag, int step, u32* err) {
    const int np = n >> 1;
    uint4 v[MAXN / 2 / NT];
#pragma unroll
    for (int k = 0; k < MAXN / 2 / NT; k++) {
        int i = threadIdx.x + k * NT;
        v[k] = i < np ? ld2<V>(src + 2 * i) : make_uint4(0u, 0u, 0u, 0u);
    }
    bool ok = true;
#pragma unroll
    for (int k = 0; k < MAXN / 2 / NT; k++) {
        int i = threadIdx.x + k * NT;
        if (i < np && ok) {
            if ((v[k].y != tag || v[k].w != tag) && !spin_ll<V>(src + 2 * i, tag, step, err, v[k])) ok = false;
            x[2 * i] = __uint_as_float(v[k].x);
            x[2 * i + 1] = __uint_as_float(v[k].z);
        }
    }
    return ok;
}

// Polls *p (relaxed) until it reaches `target` (eq: equals it; else: signed difference >= 0),
// then one acquire load. One thread.
__device__ bool wait_word(const u32* p, u32 target, bool eq, int step, u32* err) {
    u64 t0 = 0;
    for (u32 it = 1;; it++) {
        u32 v = ld_relaxed(p);
        if (eq ? v == target : (int)(v - target) >= 0) break;
        if (it == 1) t0 = global_ns();
        if ((it & 63) == 0 && give_up(err, t0, it, step)) return false;
    }
    ld_acquire(p);
    return true;
}

// The reference grid barrier (thread 0): fence, one add to a single counter, spin (volatile)
// until it reaches target, fence.
__device__ bool grid_arrive(u32* c, u32 target, int step, u32* err) {
    __threadfence();
    atomicAdd(c, 1u);
    u64 t0 = global_ns();
    for (u32 it = 1; (int)(*(volatile u32*)c - target) < 0; it++)
        if ((it & 63) == 0 && give_up(err, t0, it, step)) return false;
    __threadfence();
    return true;
}

// The chain of S steps by variant V. Barriers a step: tagged 1 (after the load); counter and
// flags 3 (after the wait, after the load, before publishing); gridbar 3 (after the load, and
// the grid barrier's two).
template <int V>
__global__ void __launch_bounds__(NT, 1) chain(Args a) {
    extern __shared__ float xs[];  // 2 x N: step s's input in half s % 2 (no barrier before a load)
    const int tid = threadIdx.x, nb = gridDim.x, n = a.n;
    const int lo = (int)((long long)n * blockIdx.x / nb), hi = (int)((long long)n * (blockIdx.x + 1) / nb);
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (tid == 0) a.smid[blockIdx.x] = id;
    for (int s = 0; s < a.steps; s++) {
        float* x = xs + (s & 1) * n;
        const u32 tag = a.epoch * (u32)a.steps + (u32)s + 1u;  // step s's; step s-1's is tag - 1
        const int ib = (s + 1) & 1, ob = s & 1;                // buffers of step s-1 and step s
        int fail = 0;
        // Wait for step s-1's vector and copy it into shared memory.
        if (s == 0) {
            for (int i = tid; i < n; i += NT) x[i] = __ldcg(a.init + i);
        } else if (is_reduce(V)) {
            constexpr int K = red_stride(V);
            const u64* row = a.acc + (size_t)(s - 1) * n * K;
            u64 t0 = 0;
            u32 pend = 0;
            for (int k = 0; k < MAXN / NT; k++)
                if (tid + k * NT < n) pend |= 1u << k;
            for (u32 it = 1; pend && !fail; it++) {
                u64 w[MAXN / NT];
#pragma unroll
                for (int k = 0; k < MAXN / NT; k++)
                    if ((pend >> k) & 1) w[k] = ld_relaxed_u64(row + (size_t)(tid + k * NT) * K);
#pragma unroll
                for (int k = 0; k < MAXN / NT; k++)
                    if (((pend >> k) & 1) && (u32)(w[k] >> 56) == (u32)(fold_c(V) ? fold_c(V) : nb)) {
                        x[tid + k * NT] = (float)(u32)(w[k] & 0xffffffffu);
                        pend &= ~(1u << k);
                    }
                if (it == 1) t0 = global_ns();
                if ((it & 63) == 0 && give_up(a.err, t0, it, s)) fail = 1;
            }
        } else if (V == TAGGED3) {
            fail = !load3_batch((const uint4*)a.ll + (size_t)ib * MAXN, x, n, tag - 1u, s, a.err);
        } else if (V == TAGGED_IN) {
            fail = !load_in_batch((const u32*)a.ll + (size_t)ib * n, x, n, tag - 1u, s, a.err);
        } else if (is_tagged(V)) {
            const u64* src = a.ll + (size_t)(ib * reps(V) + (int)blockIdx.x % reps(V)) * n;
            fail = batched(V) ? !load_ll_batch<V>(src, x, n, tag - 1u, s, a.err) : !load_ll<V>(src, x, n, tag - 1u, s, a.err);
        } else {
            // counter: thread 0 waits for every block's arrival; flags: thread t < G waits for
            // block t's flag; gridbar: the previous step's grid barrier was the wait.
            if (V == COUNTER && tid == 0) fail = !wait_word(a.ctr + s - 1, a.epoch * (u32)nb, false, s, a.err);
            if (V == FLAGS && tid < nb) fail = !wait_word(a.flags + ib * nb + tid, tag - 1u, true, s, a.err);
            if (V != GRIDBAR && __syncthreads_or(fail)) return;
            for (int i = tid; i < n; i += NT) x[i] = __ldcg(a.plain + ib * n + i);
        }
        if (__syncthreads_or(fail)) return;
        if (is_reduce(V)) {
            // Every block adds into every value: its own rows' values, 0 to the others.
            constexpr int K = red_stride(V);
            u64* row = a.acc + (size_t)s * n * K;
            if (fold_c(V)) {
                // foldC: this block's share of its group's rows.
                constexpr int C = fold_c(V) > 0 ? fold_c(V) : 1;
                const int gi = (int)blockIdx.x % C, m = (nb - gi + C - 1) / C, j = (int)blockIdx.x / C;
                const int f0 = (int)((long long)n * j / m), f1 = (int)((long long)n * (j + 1) / m);
                for (int r = f0 + tid; r < f1; r += NT) {
                    u64 v = gi == 0 ? (u64)(x[(r * 5 + s) % n] + (float)(1 + (r & 7))) : 0ull;
                    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(row + (size_t)r * K), "l"(v + (1ull << 56)) : "memory");
                }
            }
            for (int r = tid; !fold_c(V) && r < n; r += NT) {
                u64 v = (r >= lo && r < hi) ? (u64)(x[(r * 5 + s) % n] + (float)(1 + (r & 7))) : 0ull;
                asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(row + (size_t)r * K), "l"(v + (1ull << 56)) : "memory");
            }
        }
        if (V == TAGGED3) {
            // This block's words of step s: three rows each.
            const int nw = (n + G3 - 1) / G3;
            const int w0 = (int)((long long)nw * blockIdx.x / nb), w1 = (int)((long long)nw * (blockIdx.x + 1) / nb);
            for (int i = w0 + tid; i < w1; i += NT) {
                u32 b[G3];
#pragma unroll
                for (int j = 0; j < G3; j++) {
                    const int r = G3 * i + j;
                    b[j] = r < n ? __float_as_uint(x[(r * 5 + s) % n] + (float)(1 + (r & 7))) : 0u;
                }
                uint4* w = (uint4*)a.ll + (size_t)ob * MAXN + i;
                asm volatile("st.relaxed.gpu.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(w), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(tag) : "memory");
            }
        }
        // This block's rows of step s, each from a value of the whole input.
        for (int r = lo + tid; !is_reduce(V) && V != TAGGED3 && r < hi; r += NT) {
            float v = x[(r * 5 + s) % n] + (float)(1 + (r & 7));
            if (V == TAGGED_IN) {
                u32* w = (u32*)a.ll + (size_t)ob * n + r;
                asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(w), "r"((__float_as_uint(v) & ~3u) | tag3(tag)) : "memory");
            } else if (is_tagged(V)) {
#pragma unroll
                for (int k = 0; k < reps(V); k++) st1<V>(a.ll + (size_t)(ob * reps(V) + k) * n + r, v, tag);
            } else {
                a.plain[ob * n + r] = v;
            }
        }
        // Publish (tagged words publish themselves).
        if (V == COUNTER || V == FLAGS || V == GRIDBAR) {
            __syncthreads();
            if (tid == 0) {
                if (V == COUNTER) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.ctr + s) : "memory");
                if (V == FLAGS) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(a.flags + ob * nb + blockIdx.x), "r"(tag) : "memory");
                if (V == GRIDBAR) fail = !grid_arrive(a.ctr + a.steps, ((a.epoch - 1u) * (u32)a.steps + (u32)s + 1u) * (u32)nb, s, a.err);
            }
            if (V == GRIDBAR && __syncthreads_or(fail)) return;
        }
    }
}

// Reference: one thread chasing pointers over 64 cache lines (8 KiB, resident in L2 after the
// first pass) with dependent ld.volatile loads. out: ns, cycles of the timed pass.
__global__ void chase(const u32* next, int hops, u64* out) {
    u32 j = 0;
    for (int h = 0; h < hops; h++) j = *(const volatile u32*)(next + j);
    u64 t0 = global_ns(), c0 = clock64();
    for (int h = 0; h < hops; h++) j = *(const volatile u32*)(next + j);
    u64 c1 = clock64(), t1 = global_ns();
    out[0] = t1 - t0, out[1] = c1 - c0, out[2] = j;
}

// Reference: __syncthreads of one block of NT threads, back to back. out: ns, cycles.
__global__ void bar_cost(int iters, u64* out) {
    __syncthreads();
    u64 t0 = global_ns(), c0 = clock64();
    for (int i = 0; i < iters; i++) __syncthreads();
    u64 c1 = clock64(), t1 = global_ns();
    if (threadIdx.x == 0) out[0] = t1 - t0, out[1] = c1 - c0;
}

int main(int argc, char** argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    if (steps < 2 || steps > 1000000) {
        printf("usage: syncbench [S]   (steps a launch, 2 .. 1000000; default 2000)\n");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, L2 %d MiB, S = %d steps a launch\n\n", prop.name, sms, prop.l2CacheSize >> 20, steps);

    u64 *ref, o[3];
    u32* next;
    CK(cudaMalloc(&ref, sizeof o));
    {
        const int hops = 1000, iters = 100000;
        std::vector<u32> h(64 * 32, 0);
        for (int l = 0; l < 64; l++) h[l * 32] = ((l + 17) % 64) * 32;  // one cycle over the 64 lines
        CK(cudaMalloc(&next, h.size() * 4));
        CK(cudaMemcpy(next, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        chase<<<1, 1>>>(next, hops, ref);
        CK(cudaGetLastError());
        CK(cudaMemcpy(o, ref, sizeof o, cudaMemcpyDeviceToHost));
        printf("L2 round trip (one thread, dependent ld.volatile, %d hops): %.1f ns a hop (%.0f SM cycles)\n", hops,
               (double)o[0] / hops, (double)o[1] / hops);
        bar_cost<<<1, NT>>>(iters, ref);
        CK(cudaGetLastError());
        CK(cudaMemcpy(o, ref, sizeof o, cudaMemcpyDeviceToHost));
        printf("__syncthreads (one block of %d threads, back to back): %.2f ns (%.1f SM cycles)\n\n", NT,
               (double)o[0] / iters, (double)o[1] / iters);
    }

    // One allocation for the vectors (tagged or plain), one for the words (counters, flags, error).
    Args a;
    const size_t vbytes = 2 * MAXR * MAXN * sizeof(u64), wbytes = (steps + 1 + 2 * NT + 1) * sizeof(u32);
    float* init;
    CK(cudaMalloc(&a.ll, vbytes));
    const size_t abytes = (size_t)RED_STEPS * MAXN * 16 * sizeof(u64);
    CK(cudaMalloc(&a.acc, abytes));
    CK(cudaMalloc(&a.ctr, wbytes));
    CK(cudaMalloc(&init, MAXN * sizeof(float)));
    CK(cudaMalloc(&a.smid, NT * sizeof(int)));
    a.plain = (float*)a.ll, a.flags = a.ctr + steps + 1, a.err = a.flags + 2 * NT, a.init = init, a.steps = steps;
    std::vector<float> hinit(MAXN);
    u32 rnd = 12345;
    for (float& v : hinit) rnd = rnd * 1664525u + 1013904223u, v = (float)(rnd >> 12);  // integers below 2^20
    CK(cudaMemcpy(init, hinit.data(), MAXN * sizeof(float), cudaMemcpyHostToDevice));
    // One block an SM: more than half an SM's shared memory a block.
    const int smem = (int)prop.sharedMemPerMultiprocessor / 2 + 1024;
    if (smem < 2 * MAXN * 4 || smem > (int)prop.sharedMemPerBlockOptin) {
        printf("shared memory sizing failed (%d bytes)\n", smem);
        return 1;
    }
    void (*kern[NVAR])(Args) = {chain<TAGGED>,         chain<TAGGED_RELAXED>, chain<TAGGED_BATCH>,
                                 chain<TAGGED_R2>,      chain<TAGGED_R4>,      chain<TAGGED_R8>,
                                 chain<TAGGED_STAG80>,  chain<TAGGED_STAG160>, chain<TAGGED_STAG320>,
                                 chain<TAGGED_IN>,      chain<TAGGED3>,
                                 chain<REDUCE1>,        chain<REDUCE4>,        chain<REDUCE16>,
                                 chain<FOLD2>,          chain<FOLD3>,          chain<FOLD9>,
                                 chain<FOLD14>,
                                 chain<COUNTER>,        chain<FLAGS>,          chain<GRIDBAR>};
    const int ns[] = {576, 896, 1536}, gs[] = {sms, sms / 2, sms / 4};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    bool all_ok = true;
    printf("| variant | N | G | us/step | check |\n|---|---|---|---|---|\n");
    // SYNCBENCH_ONLY=a,b: only the variants named.
    const char* only = getenv("SYNCBENCH_ONLY");
    for (int v = 0; v < NVAR; v++) {
        char key[64];
        snprintf(key, sizeof key, ",%s,", vname[v]);
        if (only && !strstr((std::string(",") + only + ",").c_str(), key)) continue;
        const bool tagged = is_tagged(v);
        CK(cudaFuncSetAttribute(kern[v], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern[v], NT, smem));
        const int vsteps = is_reduce(v) ? std::min(steps, RED_STEPS) : steps;
        a.steps = vsteps;
        for (int n : ns) {
            // The host's chain (exact: integers below 2^24).
            std::vector<float> want(hinit.begin(), hinit.begin() + n), nxt(n);
            for (int s = 0; s < vsteps; s++) {
                for (int r = 0; r < n; r++) nxt[r] = want[(r * 5 + s) % n] + (float)(1 + (r & 7));
                want.swap(nxt);
            }
            for (int g : gs) {
                printf("| %s | %d | %d | ", vname[v], n, g);
                if (occ < 1 || g > occ * sms || g > NT || g < 1 || n > MAXN || n % (v == TAGGED_IN ? 4 : 2)) {
                    printf("- | REFUSED (occupancy %d a SM) |\n", occ);
                    all_ok = false;
                    continue;
                }
                a.n = n;
                CK(cudaMemset(a.ll, 0, vbytes));
                CK(cudaMemset(a.ctr, 0, wbytes));
                CK(cudaMemset(a.smid, 0xff, NT * sizeof(int)));
                std::vector<float> ms;
                std::vector<u64> got(n);
                char why[128] = "";
                for (int e = 1; e <= 7 && !why[0]; e++) {
                    a.epoch = (u32)e;
                    if (is_reduce(v)) {
                        CK(cudaMemset(a.acc, 0, abytes));
                        CK(cudaMemset(a.err, 0, sizeof(u32)));
                    }
                    CK(cudaEventRecord(e0));
                    kern[v]<<<g, NT, smem>>>(a);
                    CK(cudaGetLastError());
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float t;
                    CK(cudaEventElapsedTime(&t, e0, e1));
                    if (e > 2) ms.push_back(t);
                    u32 err;
                    CK(cudaMemcpy(&err, a.err, sizeof err, cudaMemcpyDeviceToHost));
                    if (err) {
                        snprintf(why, sizeof why, "FAIL (launch %d: a wait of step %u timed out)", e, err - 1);
                        break;
                    }
                    // The last step's vector (buffer (S-1) % 2, its last copy): values, and tags
                    // of step S-1.
                    const int fb = ((vsteps - 1) & 1) * reps(v) + reps(v) - 1, esz = tagged ? 8 : 4;
                    const u32 ftag = (u32)e * (u32)vsteps + (u32)vsteps;
                    int bad = 0;
                    if (is_reduce(v)) {
                        const int K = red_stride(v);
                        std::vector<u64> rowv((size_t)n * K);
                        CK(cudaMemcpy(rowv.data(), a.acc + (size_t)(vsteps - 1) * n * K, rowv.size() * 8, cudaMemcpyDeviceToHost));
                        for (int r = 0; r < n; r++) {
                            u64 w = rowv[(size_t)r * K];
                            bad += (u32)(w >> 56) != (u32)(fold_c(v) ? fold_c(v) : g) || (float)(u32)(w & 0xffffffffu) != want[r];
                        }
                    } else if (v == TAGGED3) {
                        const int nw = (n + G3 - 1) / G3;
                        std::vector<uint4> words(nw);
                        CK(cudaMemcpy(words.data(), (uint4*)a.ll + (size_t)fb * MAXN, nw * sizeof(uint4), cudaMemcpyDeviceToHost));
                        for (int r = 0; r < n; r++) {
                            const uint4& w = words[r / G3];
                            const u32 bits = r % G3 == 0 ? w.x : r % G3 == 1 ? w.y : w.z;
                            u32 wbits;
                            memcpy(&wbits, &want[r], 4);
                            bad += bits != wbits || w.w != ftag;
                        }
                    } else
                        CK(cudaMemcpy(got.data(), (char*)a.ll + (size_t)fb * n * esz, (size_t)n * esz, cudaMemcpyDeviceToHost));
                    for (int r = 0; r < n && !is_reduce(v) && v != TAGGED3; r++) {
                        u32 bits = tagged ? (u32)got[r] : ((const u32*)got.data())[r], wbits;
                        memcpy(&wbits, &want[r], 4);
                        if (v == TAGGED_IN) bad += (bits & ~3u) != wbits || (bits & 3u) != tag3(ftag);
                        else bad += bits != wbits || (tagged && (u32)(got[r] >> 32) != ftag);
                    }
                    if (bad) snprintf(why, sizeof why, "FAIL (launch %d: %d of %d values wrong)", e, bad, n);
                }
                std::vector<int> sm(g);
                CK(cudaMemcpy(sm.data(), a.smid, g * sizeof(int), cudaMemcpyDeviceToHost));
                std::sort(sm.begin(), sm.end());
                bool shared = std::unique(sm.begin(), sm.end()) != sm.end();
                if (why[0]) {
                    all_ok = false;
                    printf("- | %s |\n", why);
                } else {
                    std::sort(ms.begin(), ms.end());
                    printf("%.3f | ok%s |\n", ms[ms.size() / 2] * 1e3 / vsteps, shared ? " (blocks shared an SM)" : "");
                }
                fflush(stdout);
            }
        }
    }
    if (!all_ok) printf("\nFAILED: see the check column\n");
    return all_ok ? 0 : 1;
}
