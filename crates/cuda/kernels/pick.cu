// The greedy pick of a row of logits on the device, so that a decode step copies back four
// words instead of the vocabulary's logits. It chooses as the host sampler does without logit
// bias or penalties (crates/sampler: `Sampler::sample` when greedy): the first NaN or +inf is
// an error, tokens at -inf are masked, and the highest of the rest wins, the lowest id among
// equals.
//
// Blocks of PICK_THREADS, each over PICK_CHUNK logits; each block's (best, index, bad) goes to
// the words after the result, and the last block to finish (a ticket, reset by it) picks among
// them. The rule is exact (no arithmetic), so the order the blocks finish in does not matter.
// out (words): status (0: a token, 1: a bad logit, 2: every token masked), the token's or the
// bad logit's index, its value's bits, and the word after the row (x[n]: the persistent
// kernel's error flag) when `flag` is set, else 0; then the ticket; then 3 words a block.
#define PICK_THREADS 1024
#define PICK_PER_THREAD 8
#define PICK_CHUNK (PICK_THREADS * PICK_PER_THREAD)

// A warp's best (value, index) and lowest bad index, in every lane: the higher value wins, the
// lower index among equal values (a lane that saw only masked tokens holds -inf with no index,
// which never wins).
__device__ __forceinline__ void pick_warp(float& best, int& bi, int& bad) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off);
        int oi = __shfl_xor_sync(0xffffffffu, bi, off), ob = __shfl_xor_sync(0xffffffffu, bad, off);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
        bad = min(bad, ob);
    }
}

// The block's best (value, index) and lowest bad index, in warp 0's lanes.
__device__ __forceinline__ void pick_block(float& best, int& bi, int& bad) {
    __shared__ float wv[32];
    __shared__ int wi[32], wb[32];
    pick_warp(best, bi, bad);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) wv[warp] = best, wi[warp] = bi, wb[warp] = bad;
    __syncthreads();
    if (warp == 0) {
        best = wv[lane], bi = wi[lane], bad = wb[lane];
        pick_warp(best, bi, bad);
    }
}

extern "C" __global__ void __launch_bounds__(PICK_THREADS) pick_greedy(const float* __restrict__ x, int n, int flag,
                                                                       u32* __restrict__ out) {
    pdl_trigger();
    pdl_wait();
    const float inf = __int_as_float(0x7f800000);
    float best = -inf;
    int bi = 0x7fffffff, bad = 0x7fffffff;
    // Each thread's indices rise, so its first bad index and (strictly greater) its best are the
    // lowest of their kind.
    int base = blockIdx.x * PICK_CHUNK + threadIdx.x;
    float v[PICK_PER_THREAD];
#pragma unroll
    for (int j = 0; j < PICK_PER_THREAD; j++) {
        int i = base + j * PICK_THREADS;
        v[j] = i < n ? __ldcg(x + i) : -inf;
    }
#pragma unroll
    for (int j = 0; j < PICK_PER_THREAD; j++) {
        int i = base + j * PICK_THREADS;
        if (v[j] != v[j] || v[j] == inf) {
            bad = min(bad, i);
        } else if (v[j] > best) {
            best = v[j];
            bi = i;
        }
    }
    pick_block(best, bi, bad);
    __shared__ int last;
    u32* part = out + 5;
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = __float_as_uint(best), part[3 * blockIdx.x + 1] = (u32)bi;
        part[3 * blockIdx.x + 2] = (u32)bad;
        __threadfence();
        last = atomicAdd(out + 4, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    best = -inf, bi = 0x7fffffff, bad = 0x7fffffff;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += PICK_THREADS) {
        float ov = __uint_as_float(__ldcg(part + 3 * b));
        int oi = (int)__ldcg(part + 3 * b + 1), ob = (int)__ldcg(part + 3 * b + 2);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
        bad = min(bad, ob);
    }
    pick_block(best, bi, bad);
    if (threadIdx.x == 0) {
        u32 f = flag ? ((const u32*)x)[n] : 0u;
        if (bad != 0x7fffffff) {
            out[0] = 1, out[1] = (u32)bad, out[2] = __float_as_uint(x[bad]);
        } else if (bi == 0x7fffffff) {
            out[0] = 2, out[1] = 0, out[2] = 0;
        } else {
            out[0] = 0, out[1] = (u32)bi, out[2] = __float_as_uint(best);
        }
        out[3] = f;
        out[4] = 0;
    }
}
