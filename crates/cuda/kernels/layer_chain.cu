// Experiment CHAIN (MOLLA_KDEFS=CHAIN; launch/chain.rs, docs/cuda-persistent.md session 23): the
// graph path's one-token decode of a layer after its attention in one launch instead of seven:
// wo (+ x), gate/up with the SwiGLU quantized for down, down (+ x), then the next layer's q/k/v,
// as four phases of matvec_wide's rows (wide_rows, wide_glu_rows: the same bits) handed over by
// grid-wide counters. The RMSNorm inputs (gate/up's, the next q/k/v's) are prepared by every
// block from x, as load_input prepares them with matvec_prep_wide's 128-thread sum (the same
// bits), where the graph path runs a preparation launch. Before a block waits for a phase's
// input it asks L2 for its warps' first rows of that phase's weights (they depend on nothing),
// so that the hand-over overlaps the ramp each launch pays. Every block must be resident at
// once (the host sizes the grid by the occupancy query); every wait is bounded (2 s) and sets
// chain_err, after which the block skips to the end (the step's logits are then garbage: an
// experiment only; the host does not read the word per token).
#ifdef MOLLA_X_CHAIN
struct ChainArgs {
    MvArgs wo;    // input ready in prep0 (rope_attention quantized it)
    MvArgs gu;    // RMSNorm of x; gate and up
    MvArgs down;  // input ready in prep1 (phase 2 quantizes it)
    MvArgs qkv;   // RMSNorm of x (the next layer's); nseg 0 for the last layer
    const u8* prep0;
    u8* prep1;
};

// Arrivals after phases 1-3, then blocks done (the last zeroes all four), and the error word
// (set by a wait that timed out; never cleared). The module's own: launches of one module run
// one after another on its stream.
__device__ u32 chain_count[4];
__device__ int chain_err;

// The block's arrival after a phase: its stores first (the barrier), then one release add.
__device__ __forceinline__ void chain_arrive(u32* c) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

// Waits until every block of the grid arrived at c (thread 0 polls with acquire loads; 2 s at
// most, then chain_err). False: stop.
__device__ __forceinline__ bool chain_wait(const u32* c) {
    int* err = &chain_err;
    __shared__ int ok;
    if (threadIdx.x == 0) {
        const u64 t0 = global_ns();
        u32 v;
        ok = 1;
        for (;;) {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
            if (v >= gridDim.x) break;
            if (*(volatile int*)err) {
                ok = 0;
                break;
            }
            if (global_ns() - t0 > 2000000000ull) {
                atomicExch(err, 1);
                ok = 0;
                break;
            }
        }
    }
    __syncthreads();
    return ok != 0;
}

// An RMSNorm input prepared by the block: x * w quantized into shared memory after the f32 row
// (load_input's steps; the scale summed by the first 128 threads as matvec_prep_wide's block 0
// sums it), the scale returned.
__device__ __forceinline__ Xq chain_norm_input(const MvArgs& a, float* xs, float& scale) {
    const int n = a.cols;
    load_row(a.x, xs, n);
    __syncthreads();
    scale = rms_scale(xs, n, a.eps, 128);
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = __fmul_rn(xs[i], a.norm_w[i]);
    __syncthreads();
    quantize_q16(xs, n, (u8*)(xs + n));
    return xq_at((u8*)(xs + n), n);
}

// Blocks an SM the registers are capped for: 4 (64 registers; ptxas then spills 68 bytes, a few
// local loads a unit in the row loops), or MOLLA_KDEFS=CHAINMINB=3 (80 registers).
#ifdef MOLLA_X_CHAINMINB
#define CHAIN_MINB MOLLA_X_CHAINMINB
#else
#define CHAIN_MINB 4
#endif

MOLLA_KERNEL void __launch_bounds__(256, CHAIN_MINB) layer_chain(const ChainArgs c) {
    KTRACE(11);
    u32* count = chain_count;
    extern __shared__ float4 smem4[];
    __shared__ float glu[32];
    float* xs = (float*)smem4;
    bool ok = true;
    // 1. wo, added onto x.
    wide_rows(c.wo, prep_xq(c.wo, c.prep0, smem4), prep_scale(c.wo, c.prep0));
    chain_arrive(count);
    // 2. gate/up on RMSNorm(x), silu(gate) * up quantized into prep1.
    wide_prefetch_first(c.gu);
    ok = chain_wait(count);
    if (ok) {
        float scale;
        const Xq xq = chain_norm_input(c.gu, xs, scale);
        wide_glu_rows(c.gu, xq, scale, c.prep1, glu);
        chain_arrive(count + 1);
        // 3. down, added onto x.
        wide_prefetch_first(c.down);
        ok = chain_wait(count + 1);
    }
    if (ok) {
        wide_rows(c.down, prep_xq(c.down, c.prep1, smem4), prep_scale(c.down, c.prep1));
        chain_arrive(count + 2);
    }
    // 4. The next layer's q/k/v on RMSNorm(x).
    if (ok && c.qkv.nseg > 0) {
        wide_prefetch_first(c.qkv);
        ok = chain_wait(count + 2);
        if (ok) {
            float scale;
            const Xq xq = chain_norm_input(c.qkv, xs, scale);
            wide_rows(c.qkv, xq, scale);
        }
    }
    // The last block out zeroes the counters for the next launch (stream order keeps it after).
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(count + 3, 1u) == gridDim.x - 1) {
        for (int i = 0; i < 4; i++) count[i] = 0;
        __threadfence();
    }
}
#endif
