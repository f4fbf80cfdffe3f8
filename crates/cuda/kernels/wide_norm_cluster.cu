// MOLLA_KDEFS=WIDEPREPC (an experiment, session 51): matvec_wide_norm with the RMSNorm input
// prepared once a cluster of four blocks instead of once a block. WIDEPREP's blocks each load the
// whole f32 row (16 KiB on the 8B: 8.6 MB of L2 reads a launch over 528 blocks, against 2.7 MB for
// matvec_wide's copies of the prepared row). Here rank c of a cluster loads the row's blocks of 32
// b = 4 j + c only, quantizes x * w of them into its own shared memory and into its three
// partners' (distributed shared memory), and sums the squares that warp c of matvec_prep_wide's
// block 0 sums (thread v = 32 c + k adds x[v], x[v + 128], ...: exactly rank c's values), so that
// after one cluster barrier every block holds the whole q16 row and the four warps' sums, and
// rms_total adds them in the same order: the same bits as matvec_prep_wide + matvec_wide.
// Shared memory: xq_bytes(cols), then 128 bytes a block of 32 of the rank (a quarter of the row,
// f32) for the sum's transpose. The grid must be a multiple of four (the launch rounds it up).
#if defined(MOLLA_X_WIDEPREPC) || defined(MOLLA_X_WIDECL)

// This block's rank in its cluster.
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The shared-window address `a` of this block mapped to the block of rank `rank` in the cluster.
__device__ __forceinline__ u32 cluster_map(u32 a, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}

__device__ __forceinline__ void cluster_st16(u32 a, int4 v) {
    asm volatile("st.shared::cluster.v4.s32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ void cluster_st4(u32 a, u32 v) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}

__device__ __forceinline__ void cluster_st8(u32 a, double v) {
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(a), "d"(v) : "memory");
}

// The cluster barrier in two halves: every thread of every block arrives (release: its shared
// stores, remote ones too, visible to the cluster after the wait), then waits.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The 32-bit word at shared address a of this block, stored at the same address in the three
// other blocks of the cluster.
__device__ __forceinline__ void cluster_share4(const void* p, u32 me) {
    const u32 a = smem_u32(p), v = *(const u32*)p;
#pragma unroll
    for (u32 r = 1; r < 4; r++) cluster_st4(cluster_map(a, (me + r) & 3), v);
}

#endif
#ifdef MOLLA_X_WIDEPREPC
MOLLA_KERNEL void __cluster_dims__(4, 1, 1) __launch_bounds__(256, 4) matvec_wide_norm(const MvArgs a) {
    KTRACE(6);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    // Every block of the cluster must be running before another writes its shared memory.
    cluster_arrive_relaxed();
    u8* xqb = (u8*)smem4;
    const int n = a.cols, nb = n >> 5, part = threadIdx.x & 3, per = blockDim.x >> 2;
    const u32 me = cluster_rank();
    float* xt = (float*)(xqb + xq_bytes(n));  // rank me's values: xt[32 j + k] = x[128 j + 32 me + k]
    // This rank's blocks of 32: b = 4 j + me, j = it * per + threadIdx.x / 4.
    const int mine = nb > (int)me ? (nb - (int)me + 3) >> 2 : 0, trips = (mine + per - 1) / per;
    auto at = [&](int it, bool& live, int& j) {
        j = it * per + (threadIdx.x >> 2);
        live = j < mine;
        return 32 * (live ? 4 * j + (int)me : 0) + 8 * part;
    };
    float w0[8], w1[8];
    bool live;
    int j;
    if (trips <= 2) {
        load8(a.norm_w + at(0, live, j), w0);
        if (trips == 2) load8(a.norm_w + at(1, live, j), w1);
    }
    pdl_wait();
    cluster_wait();
    auto trip = [&](int it, const float* w) {
        const int i = at(it, live, j);
        float x[8], v[8];
        if (((size_t)a.x & 15) == 0) {
            const float4 xa = __ldcg((const float4*)(a.x + i)), xb = __ldcg((const float4*)(a.x + i) + 1);
            x[0] = xa.x, x[1] = xa.y, x[2] = xa.z, x[3] = xa.w, x[4] = xb.x, x[5] = xb.y, x[6] = xb.z, x[7] = xb.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) x[e] = __ldcg(a.x + i + e);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = __fmul_rn(x[e], w[e]);
        if (live) {
#pragma unroll
            for (int e = 0; e < 8; e++) xt[32 * j + 8 * part + e] = x[e];
        }
        const int b = i >> 5;
        q16_block(v, b, part, live, n, xqb);
        if (live) {
            // What q16_block stored (this thread's own stores: read back in order), to the others.
            const int4* q4 = (const int4*)xqb + xq_slot(4 * b + part);
            const u32 qa = smem_u32(q4);
            const int4 q = *q4;
#pragma unroll
            for (u32 r = 1; r < 4; r++) cluster_st16(cluster_map(qa, (me + r) & 3), q);
            const Xq xq = xq_at(xqb, n);
            if (part == 0) {
                cluster_share4(xq.dx + b, me);
                cluster_share4(xq.sx + b, me);
            }
            if ((part & 1) == 0) cluster_share4(xq.s16 + 2 * b + (part >> 1), me);
        }
    };
    if (trips <= 2) {
        if (trips >= 1) trip(0, w0);
        if (trips == 2) trip(1, w1);
    } else {
        for (int it = 0; it < trips; it++) {
            float w[8];
            load8(a.norm_w + at(it, live, j), w);
            trip(it, w);
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        // Warp me of matvec_prep_wide's block 0: lane k adds x[128 j + 32 me + k] over j in order.
        double ss = 0.0;
        for (int jj = 0; jj < mine; jj++) {
            double e = xt[32 * jj + threadIdx.x];
            ss += e * e;
        }
        for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        if (threadIdx.x == 0) {
            rms_red[me] = ss;
            const u32 ra = smem_u32(&rms_red[me]);
#pragma unroll
            for (u32 r = 1; r < 4; r++) cluster_st8(cluster_map(ra, (me + r) & 3), ss);
        }
    }
    cluster_arrive();
    cluster_wait();
    wide_rows(a, xq_at(xqb, n), rms_total(n, a.eps, 128));
}
#endif

// MOLLA_KDEFS=WIDECL (an experiment, session 51): matvec_wide in clusters of four, rank c copying
// the prepared q16 row's 16-byte pieces i with (i / 256) % 4 == c from L2 (four in flight a
// thread) into its own shared memory and its three partners': a quarter of the L2 reads of
// matvec_wide's copy (the 8B's down row, 35 KiB: 4.6 MB a launch instead of 18.5), then one
// cluster barrier. The same rows and walk: the same bits. The grid must be whole clusters.
#ifdef MOLLA_X_WIDECL
MOLLA_KERNEL void __cluster_dims__(4, 1, 1) __launch_bounds__(256, 4) matvec_wide_cl(const MvArgs a, const u8* prep) {
    KTRACE(5);
    extern __shared__ float4 smem4[];
    pdl_trigger();
    cluster_arrive_relaxed();
    const u32 me = cluster_rank();
    const int n = xq_bytes(a.cols) >> 4, T = blockDim.x;
    const int4* src = (const int4*)(prep + (size_t)a.cols * 4);
    pdl_wait();
    cluster_wait();
    for (int i0 = (int)me * T + threadIdx.x; i0 < n; i0 += 16 * T) {
        int4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (i0 + 4 * u * T < n) v[u] = __ldcg(src + i0 + 4 * u * T);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + 4 * u * T;
            if (i < n) {
                ((int4*)smem4)[i] = v[u];
                const u32 sa = smem_u32((int4*)smem4 + i);
#pragma unroll
                for (u32 r = 1; r < 4; r++) cluster_st16(cluster_map(sa, (me + r) & 3), v[u]);
            }
        }
    }
    cluster_arrive();
    cluster_wait();
    wide_rows(a, xq_at((u8*)smem4, a.cols), prep_scale(a, prep));
}
#endif
