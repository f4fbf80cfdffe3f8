// Cluster microbenchmark for the GPU machine (H200, sm_90): can a whole small-model decode step
// run inside ONE thread-block cluster, synchronising with cluster barriers and distributed shared
// memory (DSMEM) instead of global memory, and can a cluster of 16 SMs pull enough HBM bandwidth?
//
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/clusterbench scripts/syncbench/clusterbench.cu
//   /tmp/clusterbench [S]
//
// 1. all-gather: one cluster of C blocks (grid = C, 256 threads, one block an SM) runs syncbench's
//    chain of S steps (default 2000) over N floats, out[r] = in[(r*5 + s) % N] + (1 + r % 8), every
//    block holding the whole vector in its shared memory: block b computes rows [N*b/C, N*(b+1)/C)
//    of step s from its copy of step s-1's vector and stores them into EVERY block's copy of step
//    s's vector (mapa + st.shared::cluster). Step s writes half s % 2, reads half (s+1) % 2 (step
//    0's input, half 1, comes from global memory).
//    One synchronisation a step suffices with two halves: step s's stores into block q's half s % 2
//    must not overtake q's reads of it as step s-1's input; q made those before arriving at the
//    barrier closing step s-1, and writers store only after it (WAR). Step s+1 reads half s % 2
//    after the barrier closing step s, which every writer reached after its stores (RAW). With one
//    vector a writer could store into q's copy while q still reads it: two barriers a step.
//    sync  = cg::this_cluster().sync() after the stores (barrier.cluster.arrive + wait).
//    split = barrier.cluster.arrive.release.aligned after the stores, wait.acquire.aligned before
//            the next step's reads. Nothing lies between the two here (a step's reads are its
//            first work), so it should time as sync; it shows the split form costs nothing extra.
//    mbar  = no cluster barrier in the loop: each block has an mbarrier a half, C arrivals a phase;
//            after its stores and a __syncthreads, thread t < C arrives (release, cluster scope,
//            remote) on block t's barrier of the half written; all threads wait (try_wait.parity,
//            acquire, cluster scope) on their own block's barrier before reading. As every block
//            writes to every block, q's arrival also says q finished reading the other half (no
//            "empty" barriers), and no phase's arrival can come before the previous phase completed.
//    Cluster barrier waits cannot be bounded; mbarrier waits give up after 1 s (globaltimer),
//    setting an error word. Check: every block's copy of the final vector equals the host's chain
//    bit for bit (integers below 2^24), and no wait gave up.
// 2. stream bandwidth: each block streams its contiguous share of a 1 GiB buffer (hash-filled on
//    the device; L2 is 50 MB) into the SM and sums its u32 words:
//    bulk = a ring of K stages of B bytes in shared memory filled by cp.async.bulk: one thread
//           issues (mbarrier.arrive.expect_tx, then the copy completing on the stage's mbarrier);
//           all threads wait on it, sum the stage, __syncthreads, and thread 0 refills the stage;
//    ldg  = plain ld.global.nc.v4 (__ldg of uint4), 256 threads, 8 loads in flight a thread.
//    Shapes: one cluster of 8 or 16 blocks (one GPC), and plain grids of 16 and of all SMs. Check:
//    each block's sum equals the host's, no wait gave up, the blocks sat on distinct SMs.
// Times: cudaEvent, median of 5 launches after 2 warm-ups. Exits 1 on a failure.
#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#endif
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

typedef unsigned int u32;
typedef unsigned long long u64;

#define NT 256
#define MAXN 1536
#define HDR 1024  // dynamic shared memory before the vectors / ring: mbarriers at 0, a block sum at 512
#define TIMEOUT_NS 1000000000ull
#define TOTAL (1ull << 30)  // the streamed buffer
#define UNIT 16384          // host sums of the buffer are kept a 16 KB unit

enum { G_SYNC, G_SPLIT, G_MBAR, NG };

__host__ __device__ inline u32 hash32(u32 x) {
    x += 0x9e3779b9u;
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return x;
}

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Whether a wait of step `step` begun at t0 must stop (another thread's error, 1 s, or 2^26 polls).
__device__ __forceinline__ bool give_up(u32* err, u64 t0, u32 it, int step) {
    if (*(volatile u32*)err != 0u) return true;
    bool out = global_ns() - t0 > TIMEOUT_NS || it > (1u << 26);
    if (out) atomicCAS(err, 0u, (u32)step + 1u);
    return out;
}

__device__ __forceinline__ void record_sm(int* smid) {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[blockIdx.x] = id;
}

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ u32 mapa(u32 a, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Polls the mbarrier at bar (this block's) until the phase of parity `parity` completed; acquire
// at cluster scope (CL: remote blocks' DSMEM stores) or at the default CTA scope (bulk copies).
template <bool CL>
__device__ __forceinline__ bool mbar_wait(u32 bar, u32 parity, int step, u32* err) {
    u64 t0 = 0;
    for (u32 it = 1;; it++) {
        u32 done;
        if (CL)
            asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        else
            asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (done) return true;
        if (it == 1) t0 = global_ns();
        if ((it & 15) == 0 && give_up(err, t0, it, step)) return false;
    }
}

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

struct GArgs {
    const float* init;  // step 0's input (N floats)
    float* out;         // C x N: each block's copy of the final vector
    u32* err;           // 1 + step of the first wait that gave up
    int* smid;
    int n, steps;
};

template <int V>
__global__ void __launch_bounds__(NT, 1) gather(GArgs a) {
    extern __shared__ __align__(16) unsigned char sm[];
    float* xs = (float*)(sm + HDR);  // 2 x N
    const int tid = threadIdx.x, n = a.n;
    u32 rank, nr;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nr));
    const int C = (int)nr, lo = n * (int)rank / C, hi = n * ((int)rank + 1) / C, rows = hi - lo;
    const int q0 = tid / rows, j0 = tid % rows, dq = NT / rows, dj = NT % rows;
    const u32 xs_a = smem_addr(xs), bar_a = smem_addr(sm);  // V == G_MBAR: the barrier of half h at bar_a + 8h
    if (tid == 0) record_sm(a.smid);
    if (V == G_MBAR && tid == 0) {
        mbar_init(bar_a, (u32)C), mbar_init(bar_a + 8, (u32)C);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int i = tid; i < n; i += NT) xs[n + i] = __ldcg(a.init + i);
    // Every block started (its shared memory exists), its mbarriers initialised and its step-0
    // input loaded before any block stores into another.
    cluster_arrive();
    cluster_wait();
    int fail = 0;
    for (int s = 0; s < a.steps; s++) {
        const int ib = (s + 1) & 1, ob = s & 1;  // halves of step s-1 (read) and step s (written)
        if (V == G_SPLIT && s > 0) cluster_wait();
        if (V == G_MBAR && s > 0) fail = !mbar_wait<true>(bar_a + 8 * ib, (u32)((s - 1) >> 1) & 1u, s, a.err);
        if (!fail) {
            // Pairs i = q * rows + j (destination block q, row lo + j) spread over the threads, i =
            // tid, tid + NT, ...: C stores a row, stepped without divisions.
            const float* x = xs + ib * n;
            const int sn = s % n;
            for (int q = q0, j = j0; q < C;) {
                const int r = lo + j;
                int t = 5 * r + sn;  // (5r + s) % n, below 6n
                while (t >= n) t -= n;
                const float v = x[t] + (float)(1 + (r & 7));
                asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(mapa(xs_a + 4u * (u32)(ob * n + r), (u32)q)), "f"(v) : "memory");
                q += dq, j += dj;
                if (j >= rows) j -= rows, q++;
            }
        }
        if (V == G_SYNC) cg::this_cluster().sync();
        if (V == G_SPLIT) cluster_arrive();
        if (V == G_MBAR) {
            if (__syncthreads_or(fail)) {
                fail = 1;
                break;
            }
            // bar.sync orders the block's stores before thread tid's release (cumulativity).
            if (tid < C)
                asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(mapa(bar_a + 8u * (u32)ob, (u32)tid)) : "memory");
        }
    }
    const int fb = (a.steps - 1) & 1;
    if (V == G_SPLIT) cluster_wait();
    if (V == G_MBAR && !fail) fail = !mbar_wait<true>(bar_a + 8 * fb, (u32)((a.steps - 1) >> 1) & 1u, a.steps, a.err);
    if (!fail)
        for (int i = tid; i < n; i += NT) a.out[(size_t)rank * n + i] = xs[fb * n + i];
    // No block leaves while another may still store into its shared memory or arrive on its barriers.
    cluster_arrive();
    cluster_wait();
}

struct BArgs {
    const uint4* src;  // TOTAL bytes
    u32* res;          // a sum a block
    u32* err;
    int* smid;
    u64 nch;           // chunks of `bytes` streamed (the grid's blocks take contiguous shares)
    int bytes, stages;
};

// The block's u32 sum into res[blockIdx.x] (bsum: a zeroed shared word).
__device__ __forceinline__ void block_sum(u32 acc, u32* bsum, u32* res) {
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(bsum, acc);
    __syncthreads();
    if (threadIdx.x == 0) res[blockIdx.x] = *bsum;
}

// Ring of K stages of B bytes at HDR; mbarrier of stage k at 8k (arrival count 1 + B tx bytes).
__global__ void __launch_bounds__(NT, 1) stream_bulk(BArgs a) {
    extern __shared__ __align__(16) unsigned char sm[];
    u32* bsum = (u32*)(sm + 512);
    const u32 base = smem_addr(sm);
    const int tid = threadIdx.x, K = a.stages, B = a.bytes;
    const u64 c0 = a.nch * blockIdx.x / gridDim.x, c1 = a.nch * (blockIdx.x + 1) / gridDim.x;
    const int nc = (int)(c1 - c0);
    // Chunk j (of this block) into stage j % K: expect_tx with the issuing thread's arrival, then the copy.
    auto issue = [&](int j) {
        const u32 bar = base + 8u * (u32)(j % K), dst = base + HDR + (u32)(j % K) * (u32)B;
        const char* src = (const char*)a.src + (c0 + (u64)j) * (u64)B;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(B) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(dst), "l"(src), "r"(B), "r"(bar) : "memory");
    };
    if (tid == 0) {
        record_sm(a.smid);
        *bsum = 0u;
        for (int k = 0; k < K; k++) mbar_init(base + 8u * (u32)k, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0)
        for (int j = 0; j < K && j < nc; j++) issue(j);
    u32 acc = 0u;
    for (int i = 0; i < nc; i++) {
        const int k = i % K;
        const int fail = !mbar_wait<false>(base + 8u * (u32)k, (u32)(i / K) & 1u, i, a.err);
        if (!fail) {
            const uint4* st = (const uint4*)(sm + HDR + (size_t)k * B);
#pragma unroll 4
            for (int o = tid; o < B / 16; o += NT) {
                const uint4 v = st[o];
                acc += v.x + v.y + v.z + v.w;
            }
        }
        // Every thread is done with stage k before it is refilled (and agrees on a failure).
        if (__syncthreads_or(fail)) break;
        if (tid == 0 && i + K < nc) issue(i + K);
    }
    block_sum(acc, bsum, a.res);
}

// Chunks of 32 KB: each thread loads 8 uint4 (ld.global.nc.v4) of a chunk, then sums them.
__global__ void __launch_bounds__(NT, 1) stream_ldg(BArgs a) {
    extern __shared__ __align__(16) unsigned char sm[];
    u32* bsum = (u32*)(sm + 512);
    if (threadIdx.x == 0) record_sm(a.smid), *bsum = 0u;
    __syncthreads();
    const u64 c0 = a.nch * blockIdx.x / gridDim.x, c1 = a.nch * (blockIdx.x + 1) / gridDim.x;
    const uint4* p = a.src + c0 * (32768 / 16) + threadIdx.x;
    u32 acc = 0u;
#pragma unroll 1  // exactly 8 loads in flight a thread
    for (u64 c = c0; c < c1; c++, p += 32768 / 16) {
        uint4 v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __ldg(p + k * NT);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += v[k].x + v[k].y + v[k].z + v[k].w;
    }
    block_sum(acc, bsum, a.res);
}

__global__ void fill(u32* p, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) p[i] = hash32((u32)i);
}

#ifndef __CUDACC_RTC__
#include "../cuda_check.h"

// A launch of `grid` blocks of NT threads in clusters of `cluster` blocks (0: no cluster
// attribute). Not copyable: cfg.attrs points into it.
struct Launch {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[1];
    Launch(int grid, int cluster, int smem) {
        cfg = cudaLaunchConfig_t{};
        cfg.gridDim = dim3(grid), cfg.blockDim = dim3(NT), cfg.dynamicSmemBytes = (size_t)smem;
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cluster, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
        if (cluster > 0) cfg.attrs = at, cfg.numAttrs = 1;
    }
    Launch(const Launch&) = delete;
};

// Whether the launch fits at once: one cluster at least (cluster > 0; cudaOccupancyMaxActiveClusters)
// or `grid` co-resident blocks. Sets the kernel's shared memory and non-portable cluster attributes.
template <typename A>
static bool fits(void (*k)(A), const Launch& l, int grid, int cluster, int smem, int sms, int* how) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    if (cluster > 0) {
        CK(cudaOccupancyMaxActiveClusters(how, (const void*)k, &l.cfg));
        return *how > 0;
    }
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(how, k, NT, smem));
    return *how > 0 && grid <= *how * sms;
}

int main(int argc, char** argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 2000;
    if (steps < 2 || steps > 1000000) {
        printf("usage: clusterbench [S]   (all-gather steps a launch, 2 .. 1000000; default 2000)\n");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    // half: more than half an SM's shared memory, so one block an SM.
    const int sms = prop.multiProcessorCount, half = (int)prop.sharedMemPerMultiprocessor / 2 + 1024;
    printf("device %s (sm_%d%d), %d SMs, L2 %d MiB, %zu B shared memory a block, S = %d\n\n", prop.name,
           prop.major, prop.minor, sms, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin, steps);
    if (prop.major < 9) return printf("needs sm_90\n"), 1;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    u32* err;
    int* smid;
    CK(cudaMalloc(&err, sizeof(u32)));
    CK(cudaMalloc(&smid, 1024 * sizeof(int)));
    bool all_ok = true;
    // Runs launch() 7 times, prep() (untimed) before each and check(e, why) after each (leaves why
    // empty or says what failed); prints the rest of the row: the median of launches 3..7 (ms)
    // through show(ms), or the failure; then whether the blocks sat on distinct SMs.
    auto timed = [&](int blocks, auto prep, auto launch, auto check, auto show) {
        std::vector<float> ms;
        char why[128] = "";
        for (int e = 1; e <= 7 && !why[0]; e++) {
            prep();
            CK(cudaMemset(err, 0, sizeof(u32)));
            CK(cudaMemset(smid, 0xff, 1024 * sizeof(int)));
            CK(cudaEventRecord(e0));
            CK(launch());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float x;
            CK(cudaEventElapsedTime(&x, e0, e1));
            if (e > 2) ms.push_back(x);
            u32 h;
            CK(cudaMemcpy(&h, err, sizeof h, cudaMemcpyDeviceToHost));
            if (h) snprintf(why, sizeof why, "FAIL (launch %d: a wait of step/chunk %u gave up)", e, h - 1);
            else check(e, why);
        }
        if (why[0]) {
            all_ok = false;
            printf("- | - | %s |\n", why);
        } else {
            std::vector<int> sm(blocks);
            CK(cudaMemcpy(sm.data(), smid, blocks * sizeof(int), cudaMemcpyDeviceToHost));
            std::sort(sm.begin(), sm.end());
            std::sort(ms.begin(), ms.end());
            show(ms[ms.size() / 2]);
            printf(" | ok%s |\n", std::unique(sm.begin(), sm.end()) == sm.end() ? "" : " (blocks shared an SM)");
        }
        fflush(stdout);
    };
    printf("| test | C or G | N or (B,K) | us/step or GB/s | GB/s per SM | check |\n|---|---|---|---|---|---|\n");

    // 1. The all-gather chain in one cluster.
    {
        const char* vname[NG] = {"all-gather sync", "all-gather split", "all-gather mbar"};
        void (*kern[NG])(GArgs) = {gather<G_SYNC>, gather<G_SPLIT>, gather<G_MBAR>};
        GArgs a;
        float *init, *out;
        CK(cudaMalloc(&init, MAXN * sizeof(float)));
        CK(cudaMalloc(&out, 16 * MAXN * sizeof(float)));
        std::vector<float> hinit(MAXN);
        u32 rnd = 12345;
        for (float& v : hinit) rnd = rnd * 1664525u + 1013904223u, v = (float)(rnd >> 12);  // integers below 2^20
        CK(cudaMemcpy(init, hinit.data(), MAXN * sizeof(float), cudaMemcpyHostToDevice));
        a.init = init, a.out = out, a.err = err, a.smid = smid, a.steps = steps;
        const int smem = std::max(HDR + 2 * MAXN * 4, half);
        const int ns[] = {576, 896, 1536}, cs[] = {8, 16};
        for (int v = 0; v < NG; v++)
            for (int c : cs)
                for (int n : ns) {
                    // The host's chain (exact: integers below 2^24).
                    std::vector<float> want(hinit.begin(), hinit.begin() + n), nxt(n), got((size_t)c * n);
                    for (int s = 0; s < steps; s++) {
                        for (int r = 0; r < n; r++) nxt[r] = want[(r * 5 + s) % n] + (float)(1 + (r & 7));
                        want.swap(nxt);
                    }
                    printf("| %s | C=%d | N=%d | ", vname[v], c, n);
                    Launch l(c, c, smem);
                    int how = 0;
                    if (!fits(kern[v], l, c, c, smem, sms, &how)) {
                        printf("- | - | REFUSED (max active clusters %d) |\n", how);
                        all_ok = false;
                        continue;
                    }
                    a.n = n;
                    timed(c, [&] { CK(cudaMemset(out, 0xff, got.size() * sizeof(float))); },
                          [&] { return cudaLaunchKernelEx(&l.cfg, kern[v], a); },
                          [&](int e, char* why) {
                              CK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
                              int bad = 0;
                              for (size_t i = 0; i < got.size(); i++) bad += memcmp(&got[i], &want[i % n], 4) != 0;
                              if (bad) snprintf(why, 128, "FAIL (launch %d: %d of %d values wrong)", e, bad, c * n);
                          },
                          [&](float ms) { printf("%.3f us/step | -", ms * 1e3 / steps); });
                }
        CK(cudaFree(init));
        CK(cudaFree(out));
    }

    // 2. Streaming bandwidth from HBM.
    {
        u32 *buf, *res;
        CK(cudaMalloc(&buf, TOTAL));
        CK(cudaMalloc(&res, 1024 * sizeof(u32)));
        fill<<<4 * sms, 512>>>(buf, TOTAL / 4);
        CK(cudaGetLastError());
        // Prefix sums (mod 2^32) of the buffer's u32 words a 16 KB unit, as fill writes them.
        std::vector<u32> pre(TOTAL / UNIT + 1, 0u);
        for (u64 u = 0; u < TOTAL / UNIT; u++) {
            u32 s = 0u;
            for (u32 w = 0; w < UNIT / 4; w++) s += hash32((u32)(u * (UNIT / 4) + w));
            pre[u + 1] = pre[u] + s;
        }
        CK(cudaDeviceSynchronize());
        BArgs a;
        a.src = (const uint4*)buf, a.res = res, a.err = err, a.smid = smid;
        const int shapes[][2] = {{8, 8}, {16, 16}, {16, 0}, {sms, 0}};             // {blocks, cluster size}
        const int bk[][2] = {{16384, 8}, {32768, 6}, {49152, 4}, {32768, 0}};  // {B, K}; K = 0: ldg
        for (const auto& p : bk)
            for (const auto& sh : shapes) {
                const int B = p[0], K = p[1], g = sh[0];
                const int smem = K ? std::max(HDR + K * B, half) : half;
                void (*k)(BArgs) = K ? stream_bulk : stream_ldg;
                a.bytes = B, a.stages = K, a.nch = TOTAL / (u64)B;
                printf("| %s | %s=%d | ", K ? "bulk ring" : "ldg v4 x8", sh[1] ? "cluster C" : "grid G", g);
                if (K) printf("(%d KB, %d) | ", B / 1024, K);
                else printf("32 KB a block-iteration | ");
                Launch l(g, sh[1], smem);
                int how = 0;
                if (smem > (int)prop.sharedMemPerBlockOptin || !fits(k, l, g, sh[1], smem, sms, &how)) {
                    printf("- | - | REFUSED (%d B shared memory, occupancy %d) |\n", smem, how);
                    all_ok = false;
                    continue;
                }
                std::vector<u32> got(g);
                timed(g, [&] { CK(cudaMemset(res, 0xff, g * sizeof(u32))); },
                      [&] { return cudaLaunchKernelEx(&l.cfg, k, a); },
                      [&](int e, char* why) {
                          CK(cudaMemcpy(got.data(), res, g * sizeof(u32), cudaMemcpyDeviceToHost));
                          int bad = 0;
                          const u64 m = (u64)B / UNIT;  // units a chunk
                          for (int b = 0; b < g; b++) bad += got[b] != pre[a.nch * (b + 1) / g * m] - pre[a.nch * b / g * m];
                          if (bad) snprintf(why, 128, "FAIL (launch %d: %d of %d block sums wrong)", e, bad, g);
                      },
                      [&](float ms) {
                          const double gbs = (double)a.nch * B / (ms * 1e-3) / 1e9;
                          printf("%.0f GB/s | %.1f", gbs, gbs / g);
                      });
            }
        CK(cudaFree(buf));
        CK(cudaFree(res));
    }
    if (!all_ok) printf("\nFAILED: see the check column\n");
    return all_ok ? 0 : 1;
}
#endif
