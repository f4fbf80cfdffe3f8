// matvec_bulk: matvec_wide's rows with their weights staged by the bulk copy engine (TMA,
// compute capability 9.0 and up). matvec_wide holds one unit a lane in registers while it waits
// for it (about 5 MB in flight on the H200's 132 SMs at four blocks an SM), which is under what
// HBM needs at its latency: its big matrices stream at ~3.1 TB/s against ~3.9 for a plain read.
// Here each warp streams its rows through BULK_MAX_SLOTS (at most) slots of shared memory of its
// own: lane 0 issues one cp.async.bulk a piece (a row, or a run of whole super-blocks of a wide
// row) that completes on the slot's mbarrier, `slots` - 1 pieces ahead of the one the warp
// decodes, so that pieces are in flight without registers holding them; the first are asked for
// before the input's wait (weights depend on no kernel before: under PDL their transfer overlaps
// the kernel before). The rows are matvec_wide's (a warp a row, the rows of every segment
// strided over the grid's warps), each lane takes its units in matvec_wide's order and the units
// are decoded by the same functions from shared memory, so the outputs have matvec_wide's bits.
// K-quant rows only (Q4_K, Q5_K, Q6_K in its 224-byte blocks), whose super-blocks are whole
// 16-byte units as bulk copies need; the host checks the types and alignment (launch/bulk.rs).

#define BULK_MAX_SLOTS 4
#define BULK_WARPS 8

// Bytes of one super-block of K-quant type ty (0 for any other).
__device__ __forceinline__ int bulk_sb_bytes(int ty) {
    return ty == T_Q4_K ? 144 : ty == T_Q5_K ? 176 : ty == T_Q6_K ? Q6K_BYTES : 0;
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void bulk_bar_init(u64* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}

// `bytes` (a multiple of 16) from src to dst (both 16-byte aligned), completing on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
    // The slot was last read through the generic proxy; order those reads before the copy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ void bulk_wait(u64* bar, u32 phase) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_u32(bar)), "r"(phase)
            : "memory");
    }
}
#endif

// Row r of all segments (in order) as segment si's row rr.
__device__ __forceinline__ void bulk_locate(const MvArgs& a, int r, int& si, int& rr) {
    si = 0;
    rr = r;
    while (si + 1 < a.nseg && rr >= a.seg[si].rows) {
        rr -= a.seg[si].rows;
        si++;
    }
}

// Unit u of a K-quant row at w (shared memory) against the input xq: unit_q16's value.
__device__ __forceinline__ float bulk_unit(int ty, const u8* w, const Xq& xq, int u) {
    int4 xr[8];
    switch (ty) {
        case T_Q4_K: load_xu<T_Q4_K>(xq, u, xr); return unit_q16<T_Q4_K, false>(w, xr, xq, u);
        case T_Q5_K: load_xu<T_Q5_K>(xq, u, xr); return unit_q16<T_Q5_K, false>(w, xr, xq, u);
        case T_Q6_K: load_xu<T_Q6_K>(xq, u, xr); return unit_q16<T_Q6_K, false>(w, xr, xq, u);
        default: return __int_as_float(0x7fc00000);
    }
}

// The next piece a warp asks for: row r (of all segments), super-blocks from sb.
struct BulkCursor {
    int r;
    int sb;
};

// Lane 0: the piece at c into `slot`, then c moves on (the next piece of the row, or the warp's
// next row, nw rows on).
__device__ __forceinline__ void bulk_issue(const MvArgs& a, BulkCursor& c, int total, int nw, int piece, u8* slot,
                                           u64* bar) {
#if __CUDA_ARCH__ >= 900
    if (c.r >= total) return;
    int si, rr;
    bulk_locate(a, c.r, si, rr);
    const MvSeg& s = a.seg[si];
    const int sbb = bulk_sb_bytes(s.ty), per = piece / sbb, nsb = a.cols >> 8;
    const int n = min(per, nsb - c.sb);
    bulk_copy(slot, s.w + (size_t)rr * s.row_bytes + (size_t)c.sb * sbb, (u32)(n * sbb), bar);
    c.sb += n;
    if (c.sb >= nsb) c.sb = 0, c.r += nw;
#endif
}

// a's rows on the input matvec_prep_wide prepared at `prep` (or that the kernel before left
// ready), weights through `slots` slots of `piece` bytes a warp (the host sizes the dynamic
// shared memory: xq_bytes(cols) + BULK_WARPS * slots * piece).
MOLLA_KERNEL void __launch_bounds__(BULK_WARPS * 32, 2) matvec_bulk(const MvArgs a, const u8* prep, int piece, int slots) {
    KTRACE(12);
    extern __shared__ float4 smem4[];
#if __CUDA_ARCH__ >= 900
    __shared__ __align__(8) u64 bar[BULK_WARPS][BULK_MAX_SLOTS];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, total = mv_total(a);
    const int gw = blockIdx.x * BULK_WARPS + warp, nw = gridDim.x * BULK_WARPS;
    u8* mine = (u8*)smem4 + xq_bytes(a.cols) + (size_t)warp * slots * piece;
    BulkCursor c = {gw, 0};
    if (lane == 0) {
        for (int s = 0; s < slots; s++) bulk_bar_init(&bar[warp][s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int s = 0; s < slots; s++) bulk_issue(a, c, total, nw, piece, mine + (size_t)s * piece, &bar[warp][s]);
    }
    pdl_wait();
    const Xq xq = prep_xq(a, prep, smem4);
    const float scale = prep_scale(a, prep);
    const int nsb = a.cols >> 8;
    int j = 0;  // the warp's pieces decoded so far
    for (int r = gw; r < total; r += nw) {
        int si, rr;
        bulk_locate(a, r, si, rr);
        const MvSeg& s = a.seg[si];
        const int ty = s.ty, sbb = bulk_sb_bytes(ty), per = piece / sbb;
        float acc = 0.f;
        for (int sb0 = 0; sb0 < nsb; sb0 += per, j++) {
            const int k = j % slots;
            u8* slot = mine + (size_t)k * piece;
            bulk_wait(&bar[warp][k], (u32)(j / slots) & 1);
            // Unit u (four a super-block) of the row is at base + its offset in the row.
            const u8* base = slot - (size_t)sb0 * sbb;
            const int u0 = 4 * sb0, u1 = 4 * min(nsb, sb0 + per);
            for (int u = u0 + ((lane - u0) & 31); u < u1; u += 32) acc = __fadd_rn(acc, bulk_unit(ty, base, xq, u));
            __syncwarp();  // every lane is done with the slot
            if (lane == 0) bulk_issue(a, c, total, nw, piece, slot, &bar[warp][k]);
        }
        acc = warp_sum(acc);
        if (lane == 0) mv_store(s, 0, rr, mv_scaled(acc, scale));
    }
#endif
}
