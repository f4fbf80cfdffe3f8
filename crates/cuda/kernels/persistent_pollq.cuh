// MOLLA_KDEFS=POLLQ (an experiment, session 42): a matvec step's input quantized while it is
// polled, not after the poll's barrier. The first PK_POLLERS threads poll one value a thread and
// round (thread t: values t, t + PK_POLLERS, ... of the row, 8-byte loads, a warp's 256 bytes
// contiguous), so that one poll round of a warp holds one whole q16 block of 32 values; as soon as
// every lane of the warp has its value of a block, the warp quantizes it (q16_warp_block, the
// bits of q16_block), while the values still missing are polled. An RMSNorm input's sum of
// squares is the poller's own, in rms_part's order (thread v adds x[v], x[v + 128], ...; the
// pollers are the first 128 threads), stored into rms_red as rms_part stores it. The step then
// needs one barrier after its input, not two, and only the last-arriving block's quantization
// lies after the last value's arrival.
#if defined(MOLLA_X_POLLQ) && defined(PK_TYMASK)
#define PK_POLLQ 1
#if defined(MOLLA_X_QMAGIC) || defined(MOLLA_X_NOSPLIT)
#error "MOLLA_X_POLLQ is built without QMAGIC and NOSPLIT"
#endif
static_assert(PK_POLLERS == PK_NORM_THREADS, "the pollers sum RMSNorm's squares in rms_part's order");

// A tagged word's value and tag (8-byte load, relaxed at GPU scope).
__device__ __forceinline__ uint2 ld_ll1(const u64* p) {
    uint2 v;
    asm volatile("ld.relaxed.gpu.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_acc1(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// The input of matvec step st (n = st.cols values, whole blocks of 32) polled and quantized into
// the Xq at xq: tagged words at st.x (ACC false) or, for a folded step's input (ACC), the
// accumulator words at st.x each counting `count` adds, plus the raw row xraw. With `norm`, each
// value x is kept in xraw (the residual the next accumulating step adds), x * w quantized (w:
// st.norm_w) and x^2 summed into rms_red. Then the cp.async groups but `keep` waited for and a
// barrier. False when the kernel must stop.
template <bool ACC>
__device__ bool pk_poll_q16(const PkArgs& a, const PkStep& st, float* xraw, u8* xq, bool norm, u32 tag, u32 count,
                            int keep, int step) {
    int ok = 1;
    const int t = (int)threadIdx.x, lane = t & 31, n = st.cols;
    if (PK_POLLER(t)) {
        const u32 nap = pk_nap(a);
        const u64* src = (const u64*)st.x;
        double ss = 0.0;
        for (int rb = 0; rb < n && ok; rb += 8 * PK_POLLERS) {
            // Round rb: value rb + t + PK_POLLERS u for u < 8 (bit u of pend: not yet arrived;
            // of todo: its warp's block not yet quantized). n is whole blocks of 32, so a value
            // lies in the row exactly when its warp's first does: the masks are the warp's.
            u32 pend = 0;
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (rb + (t - lane) + PK_POLLERS * u < n) pend |= 1u << u;
            u32 todo = pend;
            float val[8], wv[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                val[u] = 0.f;
                wv[u] = 1.f;
                if (norm && ((pend >> u) & 1)) wv[u] = __ldg(st.norm_w + rb + t + PK_POLLERS * u);
            }
            u64 t0 = 0;
            for (int it = 0; todo; it++) {
                if (pend) {
                    u64 w[8];
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        if ((pend >> u) & 1) {
                            const u64* p = src + rb + t + PK_POLLERS * u;
                            if (ACC) w[u] = ld_acc1(p);
                            else {
                                const uint2 v = ld_ll1(p);
                                w[u] = ((u64)v.y << 32) | v.x;
                            }
                        }
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        if (!((pend >> u) & 1)) continue;
                        const int i = rb + t + PK_POLLERS * u;
                        if (ACC) {
                            if (pk_acc_count(w[u]) != count) continue;
                            // The graph path's fixed-point rows (matvec.cu mv_store_fx), the same bits.
                            val[u] = fx_value(pk_acc_sum(w[u])) + xraw[i];
                        } else {
                            if ((u32)(w[u] >> 32) != tag) continue;
                            val[u] = __uint_as_float((u32)w[u]);
                        }
                        pend &= ~(1u << u);
                    }
                }
                // Blocks every lane of the warp now holds: quantized at once.
                const u32 ready = todo & ~__reduce_or_sync(0xffffffffu, pend);
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if ((ready >> u) & 1) {
                        const int i = rb + t + PK_POLLERS * u;
                        if (norm) xraw[i] = val[u];
                        q16_warp_block(norm ? __fmul_rn(val[u], wv[u]) : val[u], i >> 5, n, xq);
                    }
                todo &= ~ready;
                if (todo && !__all_sync(0xffffffffu, pk_poll_on(a, it, t0, nap, step))) {
                    ok = 0;
                    break;
                }
            }
            if (norm) {
                // rms_part's order: x[v], x[v + 128], ... (this thread's values, in order).
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (rb + (t - lane) + PK_POLLERS * u < n) {
                        double e = val[u];
                        ss += e * e;
                    }
            }
        }
        if (norm) {
            for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
            if (lane == 0) rms_red[t >> 5] = ss;
        }
    }
    // The first chunk's copies (pk_matvec reads it after this barrier without another).
    cp_wait_n(keep);
    return __syncthreads_and(ok) != 0;
}
#else
#define PK_POLLQ 0
#endif
