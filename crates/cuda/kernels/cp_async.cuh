// Asynchronous copies from global into shared memory (cp.async, compute capability 8.0 and up):
// the persistent kernel's weight and cache staging, and rope_attention's.

__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// Asks L2 for the 128-byte line holding p (no copy into the SM, no bulk copy unit: a launch
// that issues cp.async.bulk.prefetch.L2 delays the next by ~15 us, session 62's mvbench pf).
__device__ __forceinline__ void l2_line(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory"); }

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Rows 0 .. n-1 of u (<= threads) 16-byte units each, `stride` halves apart from src, into dst
// back to back, by the block's first `threads` threads (no commit); with swz, unit j of row p goes
// to slot j ^ (p & 7) (attention.cu key_dot_swz's layout). Thread t copies unit t % u of every
// (threads / u)-th row: two divisions a thread, not two a unit.
// stage_rows16_at: the same by `threads` threads numbered t = 0 .. threads - 1 (the caller's
// numbering: the persistent kernel's stagers are a block's last threads, PK_POLLERS).
__device__ __forceinline__ void stage_rows16_at(u32 dst, const u16* src, size_t stride, int u, int n, bool swz,
                                                int threads, u32 t) {
    const int per = threads / u, j = t % u;
    if ((int)t >= per * u) return;
    for (int p = t / u; p < n; p += per)
        cp_async16(dst + 16 * (p * u + (swz ? j ^ (p & 7) : j)), src + (size_t)p * stride + 8 * j);
}
__device__ __forceinline__ void stage_rows16(u32 dst, const u16* src, size_t stride, int u, int n, bool swz, int threads) {
    stage_rows16_at(dst, src, stride, u, n, swz, threads, threadIdx.x);
}
