// mvbench's `pf` mode (included by mvbench.cu after its kernels, Shape and row_bytes): what asking
// L2 for a matrix during an attention-length launch saves that matrix's matvec (session 62).

// Spins for `ns` nanoseconds of the global timer.
__device__ void spin_for(long long ns) {
    long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= ns) break;
    }
}

// `./mvbench pf`: a stand-in for rope_attention (blocks that spin for `ns` nanoseconds, HBM idle
// meanwhile), optionally asking L2 for the next matrix's first `pf` bytes in 16 KiB pieces
// (sm_90's bulk prefetch, fire and forget) once it begins, then the matvec on that matrix.
__global__ void spin_pf(long long ns, const u8* p, size_t pf) {
#if __CUDA_ARCH__ >= 900
    const size_t PIECE = 16384, n = (pf + PIECE - 1) / PIECE, who = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = who; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const unsigned len = (unsigned)(pf - i * PIECE < PIECE ? pf - i * PIECE : PIECE);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + i * PIECE), "r"(len) : "memory");
    }
#endif
    spin_for(ns);
}
// spin_pf with the first `pf` bytes asked of L2 a 128-byte line at a time (cp_async.cuh l2_line,
// no bulk copy unit), the lines spread over the grid's threads.
__global__ void spin_pf_lines(long long ns, const u8* p, size_t pf) {
    const size_t n = pf / 128, who = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = who; i < n; i += (size_t)gridDim.x * blockDim.x)
        l2_line(p + i * 128);
    spin_for(ns);
}
// Per shape and spin: the spin alone, spin + matvec (cold: matrices cycled through the pool of
// `pool` bytes at wpool), spin with the matrix's first P bytes asked of L2 + matvec; the matvec's
// share is the pair's time less the spin's. Spins of 32 blocks (rope_attention's 8B grid).
// `timed(body)`: the milliseconds the launches `body` queues take.
template <class Timed>
void pf_bench(u8* wpool, size_t pool, const float* x, u8* xq, float* y, int sms, int iters, Timed timed) {
    const Shape pshapes[] = {{"wo 4096x4096 Q4_K", T_Q4_K, 4096, 4096}, {"qkv 6144x4096 Q4_K", T_Q4_K, 6144, 4096},
                             {"gate+up 28672x4096 Q4_K", T_Q4_K, 28672, 4096}, {"down 4096x14336 Q6_K", T_Q6_K, 4096, 14336}};
    for (const Shape& sh : pshapes) {
        const int rb = row_bytes(sh.ty, sh.cols);
        const size_t mbytes = (size_t)sh.rows * rb;
        const int nbuf = (int)std::max<size_t>(1, pool / mbytes);
        CK(cudaFuncSetAttribute(bench_prep_xq, cudaFuncAttributeMaxDynamicSharedMemorySize, sh.cols * 4 + xq_bytes(sh.cols)));
        bench_prep_xq<<<1, 128, sh.cols * 4 + xq_bytes(sh.cols)>>>(x, sh.cols, xq);
        const int sm = xq_bytes(sh.cols);
        const void* fn = sh.ty == T_Q4_K ? (const void*)mv_lean<256, 4> : (const void*)mv_warp<0, T_Q6_K, 256, 4>;
        const Kern k = sh.ty == T_Q4_K ? (Kern)mv_lean<256, 4> : (Kern)mv_warp<0, T_Q6_K, 256, 4>;
        CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
        int per;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, 256, sm));
        const int grid = std::min(sms * std::min(per, 4), (sh.rows + 7) / 8);
        auto w = [&](int i) { return wpool + (size_t)(i % nbuf) * mbytes; };
        const long long spins[] = {3000, 5000};
        for (long long ns : spins) {
            const size_t pfs[] = {0, (size_t)4 << 20, (size_t)8 << 20, (size_t)16 << 20, (size_t)24 << 20, mbytes};
            const float alone = timed([&] {
                for (int i = 0; i < iters; i++) spin_pf<<<32, 256>>>(ns, w(i + 1), 0);
            }) * 1e3f / iters;
            // The spin (asking by `pfk`, "asked": bulk, "lines": a line at a time), then the matvec.
            auto pair = [&](const char* how, void (*pfk)(long long, const u8*, size_t), size_t P) {
                const float t = timed([&] {
                    for (int i = 0; i < iters; i++) {
                        pfk<<<32, 256>>>(ns, w(i + 1), P);
                        k<<<grid, 256, sm>>>(w(i + 1), sh.rows, rb, sh.cols, xq, y);
                    }
                }) * 1e3f / iters;
                printf("%-24s spin %4lld ns (%5.2f us)  L2 %-5s %5.1f MiB of %5.1f  pair %7.2f us  matvec %6.2f us\n", sh.name, ns,
                       alone, how, P / 1048576.0, mbytes / 1048576.0, t, t - alone);
            };
            for (size_t P : pfs) {
                if (P > mbytes) continue;
                pair("asked", spin_pf, P);
                if (P > 0) pair("lines", spin_pf_lines, P);
            }
        }
        // The matrix L2-resident (the same one each launch), for the best case.
        const float hot = timed([&] {
            for (int i = 0; i < iters; i++) k<<<grid, 256, sm>>>(w(0), sh.rows, rb, sh.cols, xq, y);
        }) * 1e3f / iters;
        const float cold = timed([&] {
            for (int i = 0; i < iters; i++) k<<<grid, 256, sm>>>(w(i + 1), sh.rows, rb, sh.cols, xq, y);
        }) * 1e3f / iters;
        printf("%-24s back to back: same matrix %6.2f us, cycled %6.2f us\n", sh.name, hot, cold);
    }
}
