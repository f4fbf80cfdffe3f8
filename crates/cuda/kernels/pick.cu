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
        // Blocks of fewer than 32 warps (matvec_wide_pick's 8): the lanes past them hold nothing.
        const bool w = lane < (int)(blockDim.x >> 5);
        best = w ? wv[lane] : -__int_as_float(0x7f800000), bi = w ? wi[lane] : 0x7fffffff;
        bad = w ? wb[lane] : 0x7fffffff;
        pick_warp(best, bi, bad);
    }
}

// The end of a greedy pick over the grid: every thread of the block calls it with its own
// (best, bi, bad) over the logits x[0 .. n) it saw; the block's goes to its words in `out`, and
// the last block to arrive (a ticket, reset by it) picks among the blocks' and writes the result
// (pick_greedy's words; with `flag`, x[n] in the fourth), and the same four words to `host` when it
// is not null (page-locked host memory mapped into the device's address space, which the host
// reads once the launch is complete: no copy after the kernel). Logits another block of this grid
// wrote are read through L2 after the ticket's fence.
__device__ void pick_finish(const float* x, int n, int flag, u32* out, u32* host, float best, int bi, int bad) {
    const float inf = __int_as_float(0x7f800000);
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
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) {
        float ov = __uint_as_float(__ldcg(part + 3 * b));
        int oi = (int)__ldcg(part + 3 * b + 1), ob = (int)__ldcg(part + 3 * b + 2);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
        bad = min(bad, ob);
    }
    pick_block(best, bi, bad);
    if (threadIdx.x == 0) {
        u32 r[4];
        if (bad != 0x7fffffff) {
            r[0] = 1, r[1] = (u32)bad, r[2] = __float_as_uint(__ldcg(x + bad));
        } else if (bi == 0x7fffffff) {
            r[0] = 2, r[1] = 0, r[2] = 0;
        } else {
            r[0] = 0, r[1] = (u32)bi, r[2] = __float_as_uint(best);
        }
        r[3] = flag ? __ldcg((const u32*)x + n) : 0u;
#pragma unroll
        for (int j = 0; j < 4; j++) out[j] = r[j];
        out[4] = 0;
        if (host) {
#pragma unroll
            for (int j = 0; j < 4; j++) host[j] = r[j];
        }
    }
}

MOLLA_KERNEL void __launch_bounds__(PICK_THREADS) pick_greedy(const float* __restrict__ x, int n, int flag,
                                                                       u32* __restrict__ out, u32* host) {
    KTRACE(10);
    pdl_trigger();
    pdl_wait();
    // Each thread's indices rise (pick_add's rule: matvec.cu).
    int base = blockIdx.x * PICK_CHUNK + threadIdx.x;
    float v[PICK_PER_THREAD];
#pragma unroll
    for (int j = 0; j < PICK_PER_THREAD; j++) {
        int i = base + j * PICK_THREADS;
        v[j] = i < n ? __ldcg(x + i) : -__int_as_float(0x7f800000);
    }
    PickAcc p = pick_acc();
#pragma unroll
    for (int j = 0; j < PICK_PER_THREAD; j++) pick_add(p, v[j], base + j * PICK_THREADS);
    pick_finish(x, n, flag, out, host, p.best, p.bi, p.bad);
}

// matvec_wide over one plain segment (a head: no bias, no accumulation, not fixed point) with
// the greedy pick of its output made by the same grid (pick_finish into `out`, as pick_greedy
// leaves it; `flag`: the word after the row, the persistent kernel's error flag, goes with it),
// so that a decode step's pick costs no launch of its own. The rows' bits are matvec_wide's. `out`
// holds 5 + 3 * gridDim.x words, its ticket zero.
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide_pick(const MvArgs a, const u8* prep, int flag, u32* out, u32* host) {
    KTRACE(11);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    pdl_wait();
    PickAcc p = pick_acc();
    wide_rows<true>(a, prep_xq(a, prep, smem4), prep_scale(a, prep), &p);
    // The rows this block stored are visible before its ticket (the last block may read one).
    __threadfence();
    pick_finish(a.seg[0].y, a.seg[0].rows, flag, out, host, p.best, p.bi, p.bad);
}

// The top k logits of a row on the device (k <= TOPK_MAX), for sampling with top-k on the host
// from k candidates instead of the vocabulary's logits. The order is the host sampler's top_n:
// higher logit first, lower id among equals, -0 equal to +0 (top_n compares with <=), -inf
// masked, the first NaN or +inf an error. Blocks of 1024 threads sort TOPK_CHUNK logits each
// (bitonic, keys of the ordered logit bits and the inverted id) and keep their k best; the last
// block to finish sorts those and writes the k best with their logits (-0 as +0, as top_n keeps
// it).
// out (words): status (0: candidates, 1: a bad logit), the bad logit's index and bits, then k
// (id, logit bits) pairs best first (a pair past the row's unmasked logits is (u32 max, -inf)),
// then the word after the row (the persistent kernel's error flag) when `flag` is set, else 0.
// The ticket and the blocks' partial lists follow at TOPK_PART.
#define TOPK_MAX 64
#define TOPK_CHUNK 4096
#define TOPK_PART (4 + 2 * TOPK_MAX)

__device__ __forceinline__ u64 topk_key(float v, int i) {
    u32 b = __float_as_uint(v == 0.f ? 0.f : v);
    u32 o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((u64)o << 32) | (u64)(0xffffffffu - (u32)i);
}

// Sorts s[0 .. n) in descending order (n a power of two); every thread of the block calls it.
__device__ void topk_sort(u64* s, int n) {
    __syncthreads();
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < (n >> 1); t += blockDim.x) {
                int i = 2 * j * (t / j) + t % j, l = i + j;
                u64 a = s[i], b = s[l];
                if ((a < b) == ((i & k) == 0)) s[i] = b, s[l] = a;
            }
            __syncthreads();
        }
}

MOLLA_KERNEL void __launch_bounds__(1024) pick_top(const float* __restrict__ x, int n, int k, int flag,
                                                            u32* __restrict__ out) {
    pdl_trigger();
    pdl_wait();
    const float inf = __int_as_float(0x7f800000);
    __shared__ u64 s[TOPK_CHUNK];
    __shared__ int sbad, last;
    if (threadIdx.x == 0) sbad = 0x7fffffff;
    int base = blockIdx.x * TOPK_CHUNK, bad = 0x7fffffff;
    for (int j = threadIdx.x; j < TOPK_CHUNK; j += blockDim.x) {
        int i = base + j;
        u64 key = 0;
        if (i < n) {
            float v = __ldcg(x + i);
            if (v != v || v == inf) bad = min(bad, i);
            else if (v > -inf) key = topk_key(v, i);
        }
        s[j] = key;
    }
    __syncthreads();
    if (bad != 0x7fffffff) atomicMin(&sbad, bad);
    topk_sort(s, TOPK_CHUNK);
    // This block's bad index and k best keys.
    u32* part = out + TOPK_PART + 1 + (size_t)blockIdx.x * (1 + 2 * TOPK_MAX);
    if (threadIdx.x == 0) part[0] = (u32)sbad;
    for (int j = threadIdx.x; j < k; j += blockDim.x) part[1 + 2 * j] = (u32)(s[j] >> 32), part[2 + 2 * j] = (u32)s[j];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(out + TOPK_PART, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    int m = gridDim.x * k, np = 1;
    while (np < m) np <<= 1;
    if (threadIdx.x == 0) sbad = 0x7fffffff;
    __syncthreads();
    for (int j = threadIdx.x; j < np; j += blockDim.x) {
        u64 key = 0;
        if (j < m) {
            const u32* p = out + TOPK_PART + 1 + (size_t)(j / k) * (1 + 2 * TOPK_MAX);
            if (j % k == 0) atomicMin(&sbad, (int)__ldcg(p));
            key = ((u64)__ldcg(p + 1 + 2 * (j % k)) << 32) | __ldcg(p + 2 + 2 * (j % k));
        }
        s[j] = key;
    }
    topk_sort(s, np);
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        u64 key = s[j];
        u32 id = key ? 0xffffffffu - (u32)key : 0xffffffffu;
        out[3 + 2 * j] = id;
        out[4 + 2 * j] = key ? __float_as_uint(x[id] + 0.f) : __float_as_uint(-inf);
    }
    if (threadIdx.x == 0) {
        int b = sbad;
        out[0] = b != 0x7fffffff;
        out[1] = b != 0x7fffffff ? (u32)b : 0u;
        out[2] = b != 0x7fffffff ? __float_as_uint(x[b]) : 0u;
        out[3 + 2 * k] = flag ? ((const u32*)x)[n] : 0u;
        out[TOPK_PART] = 0;
    }
}
