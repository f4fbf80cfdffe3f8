// What a kernel boundary costs inside a CUDA graph on this GPU, and whether programmatic
// dependent launch (PDL) hides it: the 8B's graph path runs nine dependent launches a layer and
// KTRACE measured ~1.45 us between one launch's last block and the next one's first
// (docs/cuda-persistent.md session 23).
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/pdlbench scripts/pdlbench/pdlbench.cu && /tmp/pdlbench
//
// 1. Chains of N dependent launches of tiny kernels (each reads what the one before wrote):
//    us a launch, on a stream, replayed as a graph, and as a graph of PDL launches.
// 2. Chains of streaming reads (each launch reads its own MB-sized buffer, as a decode matvec
//    reads its weights; a warp's sum goes to an output the next launch reads first): us a launch
//    and GB/s, with and without PDL, and with PDL also with each block's first loads issued
//    before griddepcontrol.wait (weights depend on no kernel before). A grid is B blocks an SM;
//    each block takes dynamic shared memory so that either no other block fits beside the B
//    ("full", as matvec_wide's four blocks fill the register file) or one more does ("room"),
//    where the next launch's first blocks can start before the last one's have ended.
// 3. The same chains as one persistent launch (4 blocks an SM, all resident): a phase a read,
//    phases handed over by a grid-wide counter (each block adds one after its reads; a block's
//    thread 0 polls it before the next phase), with or without each block's first loads of the
//    next phase issued before that poll. Against 2., what a big model's decode would gain from a
//    persistent kernel at matvec_wide's occupancy.
#include <vector>
#include "../cuda_check.h"

__device__ __forceinline__ void trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void dwait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// A tiny step: block 0's thread 0 adds one to what the step before wrote.
template <bool PDL>
__global__ void tiny(const int* in, int* out) {
    if (PDL) {
        trigger();
        dwait();
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *out = *in + 1;
}

// The first K 16-byte words of a streaming read that thread `tid` of `nt` takes (a thread takes
// words tid, tid + nt, ...), and what `read_rest` adds of the words after them.
constexpr int K_FIRST = 4;
// Output slots a launch (one a warp, up to 8 blocks of 8 warps on 132 SMs, with room to spare).
constexpr size_t SLOTS = 16384;
__device__ __forceinline__ void read_first(const int4* __restrict__ w, size_t n16, size_t tid, size_t nt, int4* first) {
#pragma unroll
    for (int k = 0; k < K_FIRST; k++) first[k] = tid + k * nt < n16 ? __ldg(w + tid + k * nt) : make_int4(0, 0, 0, 0);
}

// acc plus the thread's words (the K_FIRST it has and the rest, four loads in flight), summed
// over the warp and added to *out (a store a warp, into the warp's own slot).
__device__ __forceinline__ void read_rest(const int4* __restrict__ w, size_t n16, size_t tid, size_t nt, const int4* first,
                                          float acc, float* out) {
#pragma unroll
    for (int k = 0; k < K_FIRST; k++) acc += (float)(first[k].x ^ first[k].y ^ first[k].z ^ first[k].w);
    for (size_t i = tid + K_FIRST * nt; i < n16; i += 4 * nt) {
        int4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = i + k * nt < n16 ? __ldg(w + i + k * nt) : make_int4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < 4; k++) acc += (float)(v[k].x ^ v[k].y ^ v[k].z ^ v[k].w);
    }
    for (int off = 16; off; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    // One slot a warp: a matvec stores each row apart, and one address for every warp's atomic
    // would serialise thousands of adds in L2 (about 1 ns each), more than the read itself.
    if ((threadIdx.x & 31) == 0) out[tid >> 5] = acc * 1e-30f;
}

// A streaming read of n16 16-byte words at w (as a decode matvec reads its weights), after
// reading `in` (what the step before wrote). EARLY: the thread's first words are loaded before
// griddepcontrol.wait.
template <bool PDL, bool EARLY>
__global__ void __launch_bounds__(256) stream(const int4* __restrict__ w, size_t n16, const float* in, float* out) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    int4 first[K_FIRST];
    if (EARLY) read_first(w, n16, tid, nt, first);
    if (PDL) {
        trigger();
        dwait();
    }
    float acc = __ldcg(in);
    if (!EARLY) read_first(w, n16, tid, nt, first);
    read_rest(w, n16, tid, nt, first, acc, out);
}

// Section 3: m phases of streaming reads in one launch; counter counts block arrivals (zeroed
// before the launch); a bounded poll (err set on a timeout, 2 s).
template <bool EARLY>
__global__ void __launch_bounds__(256, 4) pchain(const int4* __restrict__ pool, size_t n16, int m, float* out,
                                                 unsigned* counter, int* err) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    int4 first[K_FIRST];
    for (int i = 0; i < m; i++) {
        const int4* w = pool + (size_t)i * n16;
        if (EARLY) read_first(w, n16, tid, nt, first);
        if (i > 0) {
            if (threadIdx.x == 0) {
                const unsigned target = (unsigned)i * gridDim.x;
                long long t0 = clock64();
                unsigned c;
                do {
                    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(c) : "l"(counter) : "memory");
                    if (clock64() - t0 > 4000000000ll) {
                        atomicExch(err, 1);
                        break;
                    }
                } while (c < target);
            }
            __syncthreads();
        }
        float acc = __ldcg(out + (size_t)i * SLOTS);
        if (!EARLY) read_first(w, n16, tid, nt, first);
        read_rest(w, n16, tid, nt, first, acc, out + (size_t)(i + 1) * SLOTS);
        __syncthreads();
        if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    }
}

template <class F>
static void launch(F* f, dim3 grid, bool pdl, cudaStream_t s, void** args, int smem = 0) {
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = dim3(256);
    c.dynamicSmemBytes = smem;
    c.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at;
    c.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelExC(&c, (const void*)f, args));
}

// us a launch of `body` (which enqueues n launches on s): on the stream, and as a graph.
template <class B>
static void timed(const char* name, int n, cudaStream_t s, B body, double bytes_each = 0) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 20;
    float ms;
    body();  // warm
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++) body();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double stream_us = ms * 1e3 / reps / n;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    body();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double graph_us = ms * 1e3 / reps / n;
    if (bytes_each > 0)
        printf("%-44s stream %7.2f us  graph %7.2f us a launch  (graph %6.0f GB/s)\n", name, stream_us, graph_us,
               bytes_each / (graph_us * 1e-6) / 1e9);
    else
        printf("%-44s stream %7.2f us  graph %7.2f us a launch\n", name, stream_us, graph_us);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs\n", prop.name, sms);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* ints;
    CK(cudaMalloc(&ints, 4096 * 4));
    CK(cudaMemset(ints, 0, 4096 * 4));
    const int n = 40;
    for (int blocks : {1, 132, 528}) {
        for (int pdl = 0; pdl < 2; pdl++) {
            char name[80];
            snprintf(name, sizeof name, "tiny x%d, %d blocks%s", n, blocks, pdl ? ", PDL" : "");
            timed(name, n, s, [&] {
                for (int i = 0; i < n; i++) {
                    const int* in = ints + i;
                    int* out = ints + i + 1;
                    void* args[] = {(void*)&in, (void*)&out};
                    if (pdl) launch(tiny<true>, dim3(blocks), true, s, args);
                    else launch(tiny<false>, dim3(blocks), false, s, args);
                }
            });
        }
    }
    // Streaming reads: 16 launches, each over its own buffer (the 8B's q/k/v is 14 MB, wo 9.4 MB,
    // down 33 MB), cycled through a pool larger than L2.
    float* fl;
    CK(cudaMalloc(&fl, 17 * SLOTS * 4));
    CK(cudaMemset(fl, 0, 17 * SLOTS * 4));
    for (double mb : {9.4, 14.2, 33.0}) {
        const size_t bytes = (size_t)(mb * 1e6) & ~(size_t)15, n16 = bytes / 16;
        const int m = 16;
        int4* pool;
        CK(cudaMalloc(&pool, bytes * m));
        CK(cudaMemset(pool, 1, bytes * m));
        // B blocks an SM, full or with room for one more, PDL, early loads.
        auto chain = [&](int b, bool room, bool pdl, bool early) {
            auto f = pdl ? (early ? stream<true, true> : stream<true, false>) : stream<false, false>;
            const int smem = (int)(prop.sharedMemPerMultiprocessor / (room ? b + 1 : b)) - 2048;
            CK(cudaFuncSetAttribute((const void*)f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            return [=, &s] {
                for (int i = 0; i < m; i++) {
                    const int4* w = pool + (size_t)i * n16;
                    size_t nn = n16;
                    const float* in = fl + (size_t)i * SLOTS;
                    float* out = fl + (size_t)(i + 1) * SLOTS;
                    void* args[] = {(void*)&w, (void*)&nn, (void*)&in, (void*)&out};
                    launch(f, dim3(sms * b), pdl, s, args, smem);
                }
            };
        };
        struct V {
            int b;
            bool room, pdl, early;
        };
        for (V v : {V{4, false, false, false}, V{4, false, true, false}, V{4, false, true, true}, V{4, true, false, false},
                    V{4, true, true, true}, V{3, true, false, false}, V{3, true, true, true}, V{2, true, false, false}, V{2, true, true, true}, V{8, false, false, false},
                    V{8, false, true, true}}) {
            char name[96];
            snprintf(name, sizeof name, "read %.1f MB x%d, %d/SM %s%s%s", mb, m, v.b, v.room ? "room" : "full",
                     v.pdl ? ", PDL" : "", v.early ? ", early" : "");
            timed(name, m, s, chain(v.b, v.room, v.pdl, v.early), bytes);
        }
        // Section 3: one persistent launch of m phases.
        unsigned* counter;
        int* err;
        CK(cudaMalloc(&counter, 4));
        CK(cudaMalloc(&err, 4));
        CK(cudaMemset(err, 0, 4));
        for (int early = 0; early < 2; early++) {
            auto f = early ? pchain<true> : pchain<false>;
            int per = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, 256, 0));
            if (per < 4) {
                printf("pchain: %d blocks an SM fit, not 4; skipped\n", per);
                continue;
            }
            char name[96];
            snprintf(name, sizeof name, "persistent %.1f MB x%d, 4/SM%s", mb, m, early ? ", early" : "");
            timed(name, m, s, [=, &s] {
                CK(cudaMemsetAsync(counter, 0, 4, s));
                const int4* w = pool;
                size_t nn = n16;
                int mm = m;
                float* o = fl;
                unsigned* c = counter;
                int* e = err;
                void* args[] = {(void*)&w, (void*)&nn, (void*)&mm, (void*)&o, (void*)&c, (void*)&e};
                launch(f, dim3(sms * 4), false, s, args);
            }, bytes);
            int herr = 0;
            CK(cudaMemcpy(&herr, err, 4, cudaMemcpyDeviceToHost));
            if (herr) printf("pchain: a poll timed out\n");
        }
        CK(cudaFree(counter));
        CK(cudaFree(err));
        CK(cudaFree(pool));
    }
    return 0;
}
