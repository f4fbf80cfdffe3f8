// The persistent decode kernel's weight staging (persistent.cu runs the steps): cp.async into
// shared memory (cp_async.cuh), a block's rows of a step, and the chunks those rows go through.

// Waits until at most n (0 .. PK_MAX_STAGES - 1) of this thread's newest cp.async groups are pending.
__device__ __forceinline__ void cp_wait_n(int n) {
    switch (n) {
        case 0: cp_wait<0>(); break;
        case 1: cp_wait<1>(); break;
        case 2: cp_wait<2>(); break;
        default: cp_wait<3>(); break;
    }
}

// Block b's rows [r0, r1) of a step with `total` rows: in 32 bits when the products fit (the
// 64-bit division is a called subroutine of ~70 instructions; measured +1.5% tokens/s on the
// SmolLM2 and Qwen shapes, session 18).
__device__ __forceinline__ void pk_rows(int total, int& r0, int& r1) {
    const unsigned b = blockIdx.x, g = gridDim.x;
    if ((unsigned long long)total * g < (1ull << 32)) {
        r0 = (int)((unsigned)total * b / g);
        r1 = (int)((unsigned)total * (b + 1) / g);
        return;
    }
    r0 = (int)((long long)total * blockIdx.x / gridDim.x);
    r1 = (int)((long long)total * (blockIdx.x + 1) / gridDim.x);
}

// A block's rows of a matvec step go through shared memory in chunks: contiguous rows of one
// segment (pair steps: the same rows of both), at most `chunk` bytes, copied with cp.async. The
// first `stages` chunks of a step are issued before the block waits for its input (weights do
// not depend on it), so their transfer overlaps the wait; later chunks are issued as buffers
// free up.
struct PkChunk {
    int seg;  // segment (pair: 0)
    int ra;   // rows [ra, rb) of that segment
    int rb;
};

// The chunk starting at the step's row `cur` (< r1); advances cur.
__device__ __forceinline__ PkChunk pk_next_chunk(const PkStep& st, int& cur, int r1, int chunk) {
    int si = 0, r = cur;
    if (!st.pair)
        while (si < st.nseg - 1 && r >= st.rows[si]) r -= st.rows[si++];
    int seg_end = cur - r + st.rows[si];
    int per_row = st.pair ? st.row_bytes[0] + st.row_bytes[1] : st.row_bytes[si];
    int n = chunk / per_row;
    if (n < 1) n = 1;
    // Whole rounds of the warps (a pair a warp, or two rows a warp): a chunk of 10 pairs would
    // take two rounds with six warps idle in the second.
    const int round = st.pair ? PK_WARPS : 2 * PK_WARPS;
    if (n >= round) n -= n % round;
    int end = min(min(r1, seg_end), cur + n);
    PkChunk c = {si, r, r + (end - cur)};
    cur = end;
    return c;
}

// A packed step's next chunk (PkStep::packed): from the step's row `cur` (< r1) to the end of its
// segment or r1, whichever is first; advances cur.
__device__ __forceinline__ PkChunk pk_seg_chunk(const PkStep& st, int& cur, int r1) {
    int si = 0, r = cur;
    if (!st.pair)
        while (si < st.nseg - 1 && r >= st.rows[si]) r -= st.rows[si++];
    int end = min(r1, cur - r + st.rows[si]);
    PkChunk c = {si, r, r + (end - cur)};
    cur = end;
    return c;
}

// The 16-byte-aligned span holding rows [ra, rb) of segment s: start and length in 16-byte units.
__device__ __forceinline__ const u8* pk_span(const PkStep& st, int s, int ra, int rb, int& n16) {
    const u8* a = st.w[s] + (size_t)ra * st.row_bytes[s];
    const u8* b = st.w[s] + (size_t)rb * st.row_bytes[s];
    const u8* a0 = (const u8*)((size_t)a & ~(size_t)15);
    n16 = (int)((b - a0 + 15) >> 4);
    return a0;
}

// Chunk c's copies into buf by the block's threads (no commit); the bytes it takes there.
__device__ __forceinline__ int pk_copy(const PkStep& st, const PkChunk& c, u8* buf) {
    u32 dst = smem_u32(buf), d0 = dst;
    for (int j = 0; j < (st.pair ? 2 : 1); j++) {
        int n16;
        const u8* src = pk_span(st, st.pair ? j : c.seg, c.ra, c.rb, n16);
        for (int i = threadIdx.x; i < n16; i += PK_THREADS) cp_async16(dst + 16 * i, src + 16 * i);
        dst += 16 * n16;
    }
    return (int)(dst - d0);
}

// Chunk c into buf by the block's threads; each of them commits one cp.async group.
__device__ void pk_issue(const PkStep& st, const PkArgs& a, const PkChunk& c, u8* buf) {
    if (!PK_SKIPS(a, PK_SKIP_FETCH)) pk_copy(st, c, buf);
    cp_commit();
}

// Asks L2 to fetch `bytes` (a multiple of 16) at p, 16-byte aligned, now: sm_90's bulk prefetch
// (nothing before it).
__device__ __forceinline__ void pk_l2_bulk(const void* p, u32 bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Asks L2 to fetch chunk c's bytes now (one thread), so that its copy into shared memory later
// reads L2 rather than waiting on HBM.
__device__ void pk_l2(const PkStep& st, const PkChunk& c) {
#if __CUDA_ARCH__ >= 900
    if (threadIdx.x != 0) return;
    for (int j = 0; j < (st.pair ? 2 : 1); j++) {
        int n16;
        const u8* src = pk_span(st, st.pair ? j : c.seg, c.ra, c.rb, n16);
        pk_l2_bulk(src, 16 * n16);
    }
#endif
}

// Row r of the chunk in shared memory (j: which of a pair), at the same address mod 16 as in
// global memory, so the row decoders' aligned loads stay aligned.
__device__ __forceinline__ const u8* pk_row(const PkStep& st, const PkChunk& c, const u8* buf, int j, int r) {
    const u8* p = buf;
    if (j == 1) {
        int n16;
        pk_span(st, 0, c.ra, c.rb, n16);
        p += 16 * n16;
    }
    int s = st.pair ? j : c.seg;
    size_t a = (size_t)(st.w[s] + (size_t)c.ra * st.row_bytes[s]);
    return p + (a & 15) + (size_t)(r - c.ra) * st.row_bytes[s];
}

// Whether this block has work in matvec step st: rows, or an RMSNorm input, which every block
// loads (each keeps the raw row for a later residual step).
__device__ __forceinline__ bool pk_busy(const PkStep& st, int r0, int r1) {
    return r0 < r1 || st.prep != PK_PREP_PLAIN;
}

// Where row r of a folded wo starts its span of 32-column units from unit u0 (ub bytes each), in
// global memory.
__device__ __forceinline__ const u8* pk_fold_row(const PkStep& st, int r, int u0, int ub) {
    return st.w[0] + (size_t)r * st.row_bytes[0] + (size_t)u0 * ub;
}

// Asks L2 for the lines of the first and last bytes of [p, p + len): the whole span of a folded
// row (two units, at most 68 bytes).
__device__ __forceinline__ void pk_l2_span(const u8* p, int len) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + len - 1));
}

#ifdef PK_NEXT_L2
// A kernel built for models with large steps (PkBuild::next_l2): once step s's input has arrived
// and its own weights have landed, the block's packed weights of step s + 1 are asked of L2
// (three bulk prefetches by one thread), so that step s + 1's copies into shared memory read L2
// rather than wait on HBM. st and d are step s's slots of pk_body's rings of four, where step
// s + 1's record and table entry already are (stored as step s - 1 ended). Session 58: see
// persistent/config.rs `next_l2` for what it is worth and where.
__device__ __forceinline__ void pk_next_l2(const PkStep& st, const PkBlk& d, int s, int nsteps) {
    if (threadIdx.x != PK_THREADS - 1 || s + 1 >= nsteps) return;
    const int o = ((s + 1) & 3) - (s & 3);
    const PkStep& nx = (&st)[o];
    const PkBlk& nd = (&d)[o];
    if (nx.op != PK_OP_MATVEC || !nx.packed || !pk_busy(nx, nd.r0, nd.r1)) return;
    for (int k = 0; k < 3; k++) {
        const int u0 = k ? nd.end[k - 1] : 0, n = nd.end[k] - u0;
        if (n > 0) pk_l2_bulk(nd.src[k] + 16 * (size_t)u0, 16u * (u32)n);
    }
}
#else
#define pk_next_l2(st, d, s, n) ((void)0)
#endif

// The RMSNorm weights of step st into nw (none for a plain input) as one cp.async group of their
// own, so that the input's preparation waits for them alone. Each of the first PK_NORM_THREADS
// threads copies the values it quantizes (quantize_trips' order), so needs no barrier to read
// them; in a packed build (POLLFIRST) the stagers copy them all before the input's barrier.
__device__ __forceinline__ void pk_stage_norm(const PkStep& st, float* nw) {
#if PK_POLL_FIRST  // the stagers copy them all
    if (st.prep != PK_PREP_PLAIN)
        for (int i = (int)threadIdx.x - PK_STAGE_T0; PK_STAGE_OK(i) && i < (st.cols >> 2); i += PK_THREADS - PK_STAGE_T0)
            cp_async16(smem_u32(nw) + 16 * i, st.norm_w + 4 * i);
#else
    if (st.prep != PK_PREP_PLAIN && threadIdx.x < PK_NORM_THREADS) {
        u32 dst = smem_u32(nw);
        for (int i = 2 * threadIdx.x; i < (st.cols >> 2); i += 2 * PK_NORM_THREADS) {
            cp_async16(dst + 16 * i, st.norm_w + 4 * i);
            cp_async16(dst + 16 * (i + 1), st.norm_w + 4 * (i + 1));  // cols: whole blocks of 32
        }
    }
#endif
    cp_commit();
}

// Chunk buffer k (of a.stages, cycled).
__device__ __forceinline__ u8* pk_buf(const PkArgs& a, u8* bufs, int k) { return bufs + (size_t)(k % a.stages) * (a.chunk + 64); }

// A packed step's weights as block entry d says, copied into bufs by the stagers (no commit).
__device__ __forceinline__ void pk_copy_packed(const PkBlk& d, const PkArgs& a, u8* bufs) {
    if (PK_SKIPS(a, PK_SKIP_ROWS) || PK_SKIPS(a, PK_SKIP_FETCH)) return;
    const u32 dst = smem_u32(bufs);
    const int n = d.end[2];
    for (int i = (int)threadIdx.x - PK_STAGE_T0; PK_STAGE_OK(i) && i < n; i += PK_THREADS - PK_STAGE_T0) {
        const u8* src = i < d.end[0] ? d.src[0] : i < d.end[1] ? d.src[1] : d.src[2];
        cp_async16(dst + 16 * i, src + 16 * (size_t)i);
    }
}

// stage_rows16_at (the same copies) with its loop not unrolled: the persistent kernel keeps code
// off a step's critical path small (persistent.cu, session 42).
__device__ __forceinline__ void pk_stage_rows(u32 dst, const u16* src, size_t stride, int u, int n, bool swz, int threads,
                                              u32 t) {
    const int per = threads / u, j = t % u;
    if ((int)t >= per * u) return;
#pragma unroll 1
    for (int p = t / u; p < n; p += per)
        cp_async16(dst + 16 * (p * u + (swz ? j ^ (p & 7) : j)), src + (size_t)p * stride + 8 * j);
}

// Code that gains nothing from unrolling is kept small: a layer runs ~80 KB of the kernel's code,
// and a step's code may be fetched again after the other steps' (on scripts/qbench SmolLM2's
// q/k/v rows take ~980 SM cycles after their code ran, ~2000 after 128 KB of other code ran).
// Taking ~520 instructions out (the stagers' RMSNorm sum and key and value copies as loops, the
// attention step's poll two pairs a thread a round) measured +0.7-1.1% tokens/s on the H200
// (session 42, MOLLA_KDEFS=KSMALL then); the poll is on the step's critical path, the rest not.

// rms_part's sum (the same adds in the same order) with its loops not unrolled.
__device__ __forceinline__ void pk_rms_part(const float* x, int n, int v0, int nt) {
    int v = (int)threadIdx.x - v0;
    if (v < 0 || v >= nt) return;
    double ss = 0.0;
#pragma unroll 1
    for (int i = v; i < n; i += nt) {
        double e = x[i];
        ss += e * e;
    }
#pragma unroll 1
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((v & 31) == 0) rms_red[v >> 5] = ss;
}
