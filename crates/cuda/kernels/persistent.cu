// The persistent decode kernel: matvec and attention steps, the step loop, the kernels (its step
// list and hand-over: persistent_steps.cuh; its weight staging: persistent_chunks.cuh).

// The model's head shape: compiled in (PK_HD, PK_HDV, PK_NH, PK_NKV; Persistent::new refuses
// another; +4-7% tokens/s, session 16) or read from the arguments (MOLLA_PK_SHAPE=0). PK_HD_T /
// PK_HDV_T: the same as attend's template arguments, 0 when not compiled in.
#ifdef PK_HD
#define PK_A_HD(a) PK_HD
#define PK_A_HDV(a) PK_HDV
#define PK_A_NH(a) PK_NH
#define PK_A_NKV(a) PK_NKV
#define PK_HD_T PK_HD
#define PK_HDV_T PK_HDV
#else
#define PK_A_HD(a) ((a).hd)
#define PK_A_HDV(a) ((a).hdv)
#define PK_A_NH(a) ((a).n_head)
#define PK_A_NKV(a) ((a).n_head_kv)
#define PK_HD_T 0
#define PK_HDV_T 0
#endif

// Whether an attention step reads its kv head's cached keys and values (positions 0 .. pos-1)
// from a copy in the chunk buffers, staged before its q, k, v are ready: when the block has one
// head, the rows are whole 16-byte units and they fit. Keys at bufs, values after them
// (*voff bytes in).
__device__ __forceinline__ bool pk_kv_staged(const PkStep& st, const PkArgs& a, int& voff) {
    int hd = PK_A_HD(a), hdv = PK_A_HDV(a), nkv = PK_A_NKV(a);
    int rowk = 2 * hd, rowv = 2 * hdv, kv_dim = nkv * hd, v_dim = nkv * hdv;
    voff = ((a.pos + 1) * rowk + 15) & ~15;
    return PK_A_NH(a) <= (int)gridDim.x && (rowk & 15) == 0 && (rowv & 15) == 0 && ((2 * kv_dim) & 15) == 0 &&
           ((2 * v_dim) & 15) == 0 && (((size_t)st.kc | (size_t)st.vc) & 15) == 0 &&
           (size_t)voff + (size_t)(a.pos + 1) * rowv <= (size_t)a.stages * (a.chunk + 64);
}

// Whether staged keys are swizzled (attention.cu key_dot_swz): when hd is a multiple of 64, so
// that the eight threads reading unit j of eight rows hit eight bank groups, not one (measured
// +3% tokens/s on SmolLM2 and Qwen shapes, session 16).
#define PK_KSWZ(a) ((PK_A_HD(a) & 63) == 0)

// The first head block b takes in attention step st: b (then b + gridDim.x, ...), or with wo
// folded in (PK_OP_ATTN_WO) b % n_head, its only one; its share of wo's rows is the step's
// table entry's [r0, r1) (crate::persistent::blocks `fold_rows`).
__device__ __forceinline__ int pk_att_head(const PkStep& st, int nh) {
    return PK_FOLD(st) ? (int)blockIdx.x % nh : (int)blockIdx.x;
}

// PK_LL_ONLY (the host's PkRoles::ll_only, by default since session 45): every step's input comes
// as tagged words, so the counter-fed path (pk_wait and a plain row's load) is not built
// (Persistent::new refuses a list that needs it).
#ifdef PK_LL_ONLY
#define PK_IN_LL(st) true
#else
#define PK_IN_LL(st) ((st).in_ll != 0)
#endif

// Before an attention step's input is ready: its head's cached keys and values into the chunk
// buffers (one cp.async group), if they fit (pk_kv_staged).
__device__ void pk_stage_kv(const PkStep& st, const PkArgs& a, u8* bufs) {
    int voff;
    const int hd = PK_A_HD(a), hdv = PK_A_HDV(a), nh = PK_A_NH(a), nkv = PK_A_NKV(a);
    const int h = pk_att_head(st, nh);
    if (h >= nh || !pk_kv_staged(st, a, voff)) return;
    int kvh = h / (nh / nkv);
    size_t kv_dim = (size_t)nkv * hd, v_dim = (size_t)nkv * hdv;
#ifndef MOLLA_X_NOSPLIT
    // The stagers only, numbered from 0 (stage_rows16_at).
    if (!PK_STAGER(threadIdx.x)) {
        cp_commit();
        return;
    }
    const u32 t = threadIdx.x - PK_POLLERS;
    const int nt = PK_THREADS - PK_POLLERS;
#else
    const u32 t = threadIdx.x;
    const int nt = PK_THREADS;
#endif
    pk_stage_rows(smem_u32(bufs), st.kc + (size_t)kvh * hd, kv_dim, hd >> 3, a.pos, PK_KSWZ(a), nt, t);
    pk_stage_rows(smem_u32(bufs + voff), st.vc + (size_t)kvh * hdv, v_dim, hdv >> 3, a.pos, false, nt, t);
    cp_commit();
}

// What pk_stage did for a matvec step: the block's rows [r0, r1), the first chunk, the chunk
// groups it committed (after the norm weights' group), the first row not yet copied, the first
// row not yet prefetched into L2.
struct PkCursor {
    int r0;
    int r1;
    PkChunk first;
    int issued;
    int ahead;
    int l2;
};

// Whether step st is packed (PkStep::packed). In a kernel built with PK_PACKED_ONLY every matvec
// step is (Persistent::new uses it only for such a list), so the chunked path is not compiled:
// measured +2.5% tokens/s on the SmolLM2 Q4_1 shape (session 17).
#ifdef PK_PACKED_ONLY
#define PK_ALL_PACKED 1
#define PK_PACKED(st) true
#else
#define PK_ALL_PACKED 0
#define PK_PACKED(st) ((st).packed != 0)
#endif

// Before the input is ready: the RMSNorm weights (pk_stage_norm) and the first chunks of step
// st, one cp.async group a chunk, then the L2 prefetch of the next a.l2_ahead chunks. A packed
// step copies all of the block's rows as its table entry d says, in one group. Attention steps
// stage their cached keys and values instead (pk_stage_kv). POLLFIRST: the pollers stage
// nothing (a packed step's cursor still comes from the table).
__device__ PkCursor pk_stage(const PkStep& st, const PkBlk& d, const PkArgs& a, float* nw, u8* bufs) {
    PkCursor k = {};
    const bool stager = !PK_POLL_FIRST || PK_STAGER(threadIdx.x);
    if (st.op == PK_OP_ATTN || st.op == PK_OP_ATTN_WO) {
        if (!stager) return k;
        if (!PK_SKIPS(a, PK_SKIP_ATTN)) pk_stage_kv(st, a, bufs);
        if (PK_FOLD(st)) {
            // The block's wo rows over its head's columns, asked of L2 (read after the attention;
            // copying them into the chunk buffers instead measured no faster, session 29).
            const int nh = PK_A_NH(a), h = pk_att_head(st, nh), ub = st.row_bytes[0] / (st.cols >> 5);
            const int uh = PK_A_HDV(a) >> 5, r0 = d.r0, r1 = d.r1;
            for (int r = r0 + (int)threadIdx.x - PK_STAGE_T0; PK_STAGE_OK(r - r0) && r < r1; r += PK_THREADS - PK_STAGE_T0)
                pk_l2_span(pk_fold_row(st, r, h * uh, ub), uh * ub);
        }
        return k;
    }
    if (st.op != PK_OP_MATVEC) return k;
    if (PK_PACKED(st)) {
        // The table's rows and spans: no divisions, no segment walk, no 64-bit address
        // arithmetic on the step's critical path (session 18).
        k.r0 = d.r0;
        k.r1 = d.r1;
        if (!pk_busy(st, k.r0, k.r1)) return k;
        if (stager) {
            pk_stage_norm(st, nw);
            pk_copy_packed(d, a, bufs);
            cp_commit();
        }
        k.issued = 1;
        k.ahead = k.l2 = k.r1;
        return k;
    }
    int r0, r1;
    pk_rows(st.total, r0, r1);
    k.r0 = r0;
    k.r1 = r1;
    if (!pk_busy(st, r0, r1)) return k;
    pk_stage_norm(st, nw);
#if !PK_ALL_PACKED
    int cur = PK_SKIPS(a, PK_SKIP_ROWS) ? r1 : r0;
    for (; k.issued < a.stages && cur < r1; k.issued++) {
        PkChunk c = pk_next_chunk(st, cur, r1, a.chunk);
        if (k.issued == 0) k.first = c;
        pk_issue(st, a, c, pk_buf(a, bufs, k.issued));
    }
    k.ahead = cur;
    for (int i = 0; i < a.l2_ahead && cur < r1 && !PK_SKIPS(a, PK_SKIP_FETCH); i++)
        pk_l2(st, pk_next_chunk(st, cur, r1, a.chunk));
    k.l2 = cur;
#endif
    return k;
}

// The input of a matvec step, prepared in shared memory (all threads take part), and the step's
// first chunk of rows landed. `after_norm`: the cp.async groups this thread committed after the
// one holding the norm weights (the first is the first chunk). Ends with a barrier, the row
// quantized to 16 bits at xq (q16.cuh) and the first chunk in shared memory; `scale`: the factor
// of every output row (RMSNorm's scale, else 1: matvec.cu load_input). False when the kernel must
// stop.
__device__ bool pk_input(const PkStep& st, const PkArgs& a, float* xs, const float* nw, float* xraw, int after_norm,
                         u8* xq, int step, float& scale) {
    int n = st.cols;
    scale = 1.f;
#if PK_POLL_FIRST
    // The stagers copied the RMSNorm weights: landed before the input's barrier.
    if (st.prep != PK_PREP_PLAIN && PK_STAGER(threadIdx.x)) cp_wait_n(after_norm);
#endif
    if (st.prep == PK_PREP_EMBED_RMSNORM) {
        const u32 token = pk_token(a);
        if (token < (u32)st.emb_rows) {
            const u8* row = st.emb + (size_t)token * st.emb_row_bytes;
            for (int c = threadIdx.x; c < (n >> 3); c += PK_THREADS) {
                float v[8];
#ifdef PK_EMBTY
                // The one type the kernel was built for (Persistent::new refuses another): 880
                // instructions fewer than every type's decoder (SmolLM2's build).
                dq8<PK_EMBTY>(row, c, v);
#else
                dq8_rt(st.emb_ty, row, c, v);
#endif
#pragma unroll
                for (int j = 0; j < 8; j++) xs[8 * c + j] = v[j];
            }
        }
        __syncthreads();
    } else if (PK_FOLD_INPUT(st)) {
        // x (the raw row this block's last RMSNorm step kept) + the folded wo's accumulator, each
        // word polled until every unit of its row was added (wo's columns / 32 of them).
        if (!pk_load_acc(a, (const u64*)st.x, xs, xraw, n, (u32)st.emb_rows, step)) return false;
    } else if (PK_IN_LL(st)) {
        // One segment known at compile time: no segment selection for each pair of each poll
        // (measured +2% tokens/s on the SmolLM2 and Qwen shapes, session 18).
        LlSeg seg = {(const u64*)st.x, xs, n};
        if (!pk_load_ll<1>(a, &seg, 1, pk_tag(a, st.in_step), step)) return false;
    } else {
        if (!pk_wait(a, st.in_step, step)) return false;
        load_row(st.x, xs, n);
        __syncthreads();
    }
    pk_stamp_arrive(a);
    pk_stamp_m(a, 5);
    pk_delay(a, st, step, PK_DELAY_IN);
    if (PK_SKIPS(a, PK_SKIP_PREP)) return true;
    const bool norm = st.prep != PK_PREP_PLAIN;
    if (norm) {
        // RMSNorm with its scale left out of the row (as load_input): the first PK_NORM_THREADS
        // threads quantize x * w (each reads the norm weights it copied itself as the step began:
        // pk_stage_norm), while the others sum the squares for the scale at once (rms_part, the
        // order rms_scale's PK_NORM_THREADS threads give). The sum is off the critical path.
        if (threadIdx.x < PK_NORM_THREADS) {
            cp_wait_n(after_norm);
            quantize_q16_w<PK_NORM_THREADS>(xs, n, xq, nw, xraw);
        } else {
            pk_rms_part(xs, n, PK_THREADS - PK_NORM_THREADS, PK_NORM_THREADS);
        }
        pk_stamp_m(a, 5);
    } else {
        quantize_q16_unsynced<PK_THREADS>(xs, n, xq);
    }
    // The first chunk's copies (pk_matvec reads it after this barrier without another).
    cp_wait_n(after_norm > 0 ? after_norm - 1 : 0);
    __syncthreads();
    scale = norm ? rms_total(n, st.eps, PK_NORM_THREADS) : 1.f;
#ifndef PK_TYMASK
    if (norm) {
        // Formats without q16 decoding read the f32 row: x * w, as load_input leaves it. (Rows
        // read xs itself, so such builds keep the full barrier at a step's end: PK_STEP_END.)
        for (int i = threadIdx.x; i < n; i += PK_THREADS) xs[i] = __fmul_rn(xs[i], nw[i]);
        __syncthreads();
    }
#endif
    return true;
}

// Stores output value v of row r: tagged, or plain f32.
__device__ __forceinline__ void pk_out(const PkStep& st, float* y, int r, float v, u32 tag) {
    if (st.out_ll) st_ll((u64*)y + r, v, tag);
    else y[r] = v;
}

// Measurement (MOLLA_PK_SKIP's PK_SKIP_ROWS): the block's output values without the work, 0 or
// the residual row (stale with PK_SKIP_PREP, which leaves it unloaded), so the steps hand over
// as before and the time left is synchronisation and input loads.
__device__ void pk_skip_chunk(const PkStep& st, const PkChunk& c, const float* xraw, u32 tag) {
    float* y = st.y[c.seg];
    const bool accumulate = !st.pair && st.accumulate[c.seg] != 0;
    for (int r = c.ra + (int)threadIdx.x; r < c.rb; r += PK_THREADS) pk_out(st, y, r, accumulate ? xraw[r] : 0.f, tag);
}

__device__ void pk_skip_rows(const PkStep& st, const float* xraw, int r0, int r1, u32 tag) {
    for (int cur = r0; cur < r1;) pk_skip_chunk(st, pk_seg_chunk(st, cur, r1), xraw, tag);
    __syncthreads();
}

// The row dots of pk_matvec (xs, xq, cols and lane in scope): pk_rows_dotn(R, ...) as
// rows_dot_ty<R>, pk_row_dot as row_dot_ty.
#ifdef PK_TYMASK
// A kernel built for one model's types (PK_TYMASK, bit t: ggml type t; the host defines it, see
// crates/cuda/src/compile.rs, and refuses a step list with other types): code only for the q16
// formats in the mask (others give NaN), so the machine code shrinks to what the model runs
// (33,200 instructions with every format, 10,432 with three).
#define PK_IN_MASK(M, T) (((unsigned long long)(M) >> (T)) & 1ull)
#define PK_TY_ON(T) PK_IN_MASK(PK_TYMASK, T)
// Row code by role (the host's PkRoles, since session 45): the gate/up pairs' row code only for
// their types (PK_TYMASK_PAIR; PK_PAIR_SAME: both matrices of a pair of one type, no row-by-row
// path; PK_PAIR_HALF, which needs it: a pair a half-warp) and the folded wo's for its types
// (PK_TYMASK_FOLD). Code never run slows a step (18 KB: 0.3-0.4 us, session 43).
#if defined(PK_PAIR_HALF) && !defined(PK_PAIR_SAME)
#error "PK_PAIR_HALF needs PK_PAIR_SAME"
#endif
#ifdef PK_TYMASK_PAIR
#define PK_ROLE_ON(ROLE, T) ((ROLE) ? PK_IN_MASK(PK_TYMASK_PAIR, T) : PK_TY_ON(T))
#else
#define PK_ROLE_ON(ROLE, T) PK_TY_ON(T)
#endif
// ROLE 1: a gate/up pair's rows. HALF: a half-warp's walk (rows_dot_q16_half; lane: 0..15).
template <int R, int ROLE = 0, bool HALF = false>
__device__ __forceinline__ void pk_rows_dot_masked(int ty, const u8* const* w, int nr, const Xq& xq, int cols, int lane,
                                                   float* acc) {
#define PK_TY_CALL(T)                                                   \
    if (!PK_ROLE_ON(ROLE, T)) break;                                   \
    if constexpr (HALF) rows_dot_q16_half<T, R>(w, nr, xq, cols, lane, acc); \
    else rows_dot_q16<T, R>(w, nr, xq, cols, lane, 32, acc)
    Q16_DISPATCH(ty, PK_TY_CALL)
#undef PK_TY_CALL
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = __int_as_float(0x7fc00000);
}
template <int ROLE = 0>
__device__ __forceinline__ float pk_row_dot_masked(int ty, const u8* w, const Xq& xq, int cols, int lane) {
    float v;
    pk_rows_dot_masked<1, ROLE>(ty, &w, 1, xq, cols, lane, &v);
    return v;
}
#define pk_rows_dotn(R, ty, w, nr, acc) pk_rows_dot_masked<R>(ty, w, nr, xq, cols, lane, acc)
#define pk_row_dot(ty, w) pk_row_dot_masked(ty, w, xq, cols, lane)
#define pk_pair_dotn(ty, w, acc) pk_rows_dot_masked<2, 1>(ty, w, 2, xq, cols, lane, acc)
#define pk_pair_dot(ty, w) pk_row_dot_masked<1>(ty, w, xq, cols, lane)
#else
#define pk_rows_dotn(R, ty, w, nr, acc) rows_dot_ty<R>(ty, w, nr, xs, xq, cols, lane, 32, acc)
#define pk_row_dot(ty, w) row_dot_ty(ty, w, xs, xq, cols, lane, 32)
#define pk_pair_dotn(ty, w, acc) pk_rows_dotn(2, ty, w, 2, acc)
#define pk_pair_dot(ty, w) pk_row_dot(ty, w)
#endif
// PK_ROWS1 (the host's PkRoles::rows1, since session 45): a warp takes one row at a time in every
// step but the gate/up pairs, only the one-row walk built (real Qwen2.5 kernel 96.1 -> 89.0 KB);
// a step with more rows a block than warps stays correct, in more rounds.
#ifdef PK_ROWS1
#define PK_ONE_ROW 1
#else
#define PK_ONE_ROW 0
#endif
#ifdef PK_PAIR_SAME
#define PK_PAIR_ONE_TYPE(t0, t1) true
#else
#define PK_PAIR_ONE_TYPE(t0, t1) ((t0) == (t1))
#endif

// pk_matvec and pk_body are inlined into the kernel: as calls, they took the kernel's argument by
// reference, a copy in local memory read with a local load for every field used, where inlined
// code reads the constant bank.
__device__ __forceinline__ bool pk_matvec(const PkStep& st, const PkBlk& d, const PkArgs& a, float* xs, const float* nw,
                                          float* xraw, u8* bufs, PkCursor staged, int step) {
    const int r0 = staged.r0, r1 = staged.r1;
    if (!pk_busy(st, r0, r1)) return true;
    // pk_stage issued the first chunks and prefetched the next l2_ahead into L2; chunk k + stages
    // goes into chunk k's buffer once chunk k is done, and each such copy prefetches one more
    // chunk into L2. A packed step's chunks all landed in pk_input, where its table entry says.
    int cur = r0, ahead = staged.ahead, l2 = staged.l2, issued = staged.issued;
    float scale;
    if (!pk_input(st, a, xs, nw, xraw, issued, (u8*)xs + a.xq_off, step, scale)) return false;
    pk_next_l2(st, d, step, a.nsteps);
    const Xq xq = xq_at((u8*)xs + a.xq_off, st.cols);
    const u32 tag = pk_tag(a, step);
    pk_stamp(a, 1);
    if (PK_SKIPS(a, PK_SKIP_ROWS)) {
        pk_skip_rows(st, xraw, r0, r1, tag);
        return true;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool packed = PK_PACKED(st);
    const int nch = packed ? d.nch : 0;
    for (int k = 0; packed ? k < nch : cur < r1; k++) {
        PkChunk c;
        u8* buf;
        const u8 *base0, *base1;  // row ra of the chunk (pair steps: of each matrix)
        if (packed) {
            c.seg = d.seg[k];
            c.ra = d.ra[k];
            c.rb = d.rb[k];
            buf = bufs;
            base0 = bufs + d.row0[k];
            base1 = bufs + d.row1;
        } else {
            if (k == 0) {
                // Landed in pk_input.
                c = staged.first;
                cur = r0 + (c.rb - c.ra);
                buf = bufs;
            } else {
                c = pk_next_chunk(st, cur, r1, a.chunk);
                cp_wait_n(issued - (k + 1));
                __syncthreads();
                buf = pk_buf(a, bufs, k);
            }
            base0 = pk_row(st, c, buf, 0, c.ra);
            base1 = st.pair ? pk_row(st, c, buf, 1, c.ra) : base0;
        }
        if (k == 0) pk_stamp(a, 2);
        // The chunk's constants in registers: stores through y may alias the step list, so the
        // loop does not read the step again.
        const int si = c.seg, cols = st.cols;
        const int ty0 = st.ty[si], ty1 = st.ty[1];
        const size_t rb0 = (size_t)st.row_bytes[si], rb1 = (size_t)st.row_bytes[1];
        float* y = st.y[si];
        if (PK_SKIPS(a, PK_SKIP_DOT)) {
            pk_skip_chunk(st, c, xraw, tag);
        } else if (st.pair) {
#ifdef PK_PAIR_HALF
            // A pair a half-warp (rows_dot_q16_half; the host's PkRoles::half), warp_sum's bits:
            // SmolLM2 Q8_0's 12 pairs a block in one round of eight warps, not two.
            const int hl = lane & 15;
            (void)ty1;
            for (int r2 = c.ra + 2 * warp; r2 < c.rb; r2 += 2 * PK_WARPS) {
                const int r = r2 + (lane >> 4), rr = r < c.rb ? r : r2;  // the warp stays whole
                const u8* w2[2] = {base0 + (size_t)(rr - c.ra) * rb0, base1 + (size_t)(rr - c.ra) * rb1};
                float gu[2];
                pk_rows_dot_masked<2, 1, true>(ty0, w2, 2, xq, cols, hl, gu);
                float g = mv_scaled(group_sum(gu[0], 16), scale);
                float u = mv_scaled(group_sum(gu[1], 16), scale);
                if (hl == 0 && r < c.rb) pk_out(st, y, r, silu_mul(g, u), tag);
            }
#else
            // Row r of gate and up share the input: one rows_dot_ty over both (when they have one
            // type).
            for (int r = c.ra + warp; r < c.rb; r += PK_WARPS) {
                const u8* w2[2] = {base0 + (size_t)(r - c.ra) * rb0, base1 + (size_t)(r - c.ra) * rb1};
                float gu[2];
                if (PK_PAIR_ONE_TYPE(ty0, ty1)) {
                    pk_pair_dotn(ty0, w2, gu);
                } else {
                    gu[0] = pk_pair_dot(ty0, w2[0]);
                    gu[1] = pk_pair_dot(ty1, w2[1]);
                }
                float g = mv_scaled(warp_sum(gu[0]), scale);
                float u = mv_scaled(warp_sum(gu[1]), scale);
                if (lane == 0) pk_out(st, y, r, silu_mul(g, u), tag);
            }
#endif
        }
#ifdef PK_FUSEQKV
        else if (ty0 == PK_T_W16) {
            pk_fused_rows(st, c.ra, c.rb, base0, rb0, cols, xraw, xs, y, tag);
        }
#endif
        else {
            // Two consecutive rows a warp, sharing each unit's input; one when the chunk has no
            // more rows than warps (wide rows: the 8B's down projection has 6 a chunk).
            const float* bias = st.bias[si];
            const bool accumulate = st.accumulate[si] != 0;
#if PK_ONE_ROW
            constexpr int per = 1;
#else
            const int per = c.rb - c.ra > PK_WARPS ? 2 : 1;
#endif
            for (int r = c.ra + per * warp; r < c.rb; r += per * PK_WARPS) {
                int nr = min(per, c.rb - r);
                const u8* w2[2] = {base0 + (size_t)(r - c.ra) * rb0, base0 + (size_t)(r + 1 - c.ra) * rb0};
                float acc[2];
                pk_rows_dotn(PK_ONE_ROW ? 1 : 2, ty0, w2, nr, acc);
                acc[0] = warp_sum(acc[0]);
                // (nr is the warp's: a step of at most one row a warp skips the second sum.)
                if (nr > 1) acc[1] = warp_sum(acc[1]);
                if (lane < nr) {
                    int rr = r + lane;
                    float v = mv_scaled(lane == 0 ? acc[0] : acc[1], scale);
                    if (bias) v += bias[rr];
                    if (accumulate) v += xraw[rr];
                    pk_out(st, y, rr, v, tag);
                }
            }
        }
        if (!PK_ALL_PACKED && ahead < r1) {
            __syncthreads();  // every warp is done with buf (else the step's end barrier follows)
            pk_issue(st, a, pk_next_chunk(st, ahead, r1, a.chunk), buf);
            issued++;
            if (l2 < r1 && !PK_SKIPS(a, PK_SKIP_FETCH)) pk_l2(st, pk_next_chunk(st, l2, r1, a.chunk));
        }
    }
    pk_stamp_m(a, 7);
    return true;
}

#ifdef PK_FOLD_WO
#if defined(PK_TYMASK) && defined(PK_TYMASK_FOLD)
#define PK_FOLD_ON(T) PK_IN_MASK(PK_TYMASK_FOLD, T)
#elif defined(PK_TYMASK)
#define PK_FOLD_ON(T) PK_TY_ON(T)
#else
#define PK_FOLD_ON(T) true
#endif

// A legacy-format unit of a folded wo row (PK_OP_ATTN_WO) at `unit` (global memory) against its
// 32 columns of the head's f32 output at x (q16_rows.cuh unit_f32); NaN for a format not folded,
// or not in the kernel's build.
__device__ __forceinline__ void pk_fold_unit_ty(int ty, const u8* unit, const float* x, float& v) {
    v = __int_as_float(0x7fc00000);
    UnitW uw;
#define PK_F32_CALL(T)                   \
    if (PK_FOLD_ON(T)) {                 \
        unit_load_legacy<T, true>(unit, uw); \
        v = unit_f32<T>(uw, x);          \
    }
    switch (ty) {
        Q16_LEGACY_CASES(PK_F32_CALL)
        default: break;
    }
#undef PK_F32_CALL
}

// The folded wo of head h (PK_OP_ATTN_WO): each unit of the block's share of wo's rows over the
// head's columns (one unit a thread) against the head's output rq (hdv f32 values, shared, visible
// since attend's barrier: no quantization and no barrier of its own), added into the accumulator
// row st.y[0] (pk_acc_add: the value in fixed point and a count the reader polls).
__device__ __forceinline__ void pk_fold_wo(const PkStep& st, const PkBlk& d, const PkArgs& a, const float* rq, int h,
                                           int step) {
    const int hdv = PK_A_HDV(a), uh = hdv >> 5, ub = st.row_bytes[0] / (st.cols >> 5), r0 = d.r0, r1 = d.r1;
    u64* acc = (u64*)st.y[0];
    const int ty = st.ty[0], n = (r1 - r0) * uh;
    // A row's uh units lie on uh consecutive lanes (uh a power of two up to 32: item i is lane i
    // % 32's), so their products are summed across those lanes (integers: exact in any order)
    // and the first adds them at once, counted uh times: a word's adds, serialised at L2, fall
    // from n_head * uh to n_head (session 29: gate/up's wait for them 1.64 -> 1.47 us in Qwen's
    // trace). Else one add a unit.
    const bool lanes = uh <= 32 && (uh & (uh - 1)) == 0;
    const int lim = lanes ? (n + 31) & ~31 : n;
    for (int i = threadIdx.x; i < lim; i += PK_THREADS) {
        const int r = r0 + i / uh, k = i % uh;
        float v = 0.f;
        if (i < n) pk_fold_unit_ty(ty, pk_fold_row(st, r, h * uh, ub) + (size_t)k * ub, rq + 32 * k, v);
        if (!lanes) {
            pk_acc_add(a, step, acc + r, v);
            continue;
        }
        long long f = i < n ? pk_acc_fx(a, step, v) : 0;
        for (int o = 1; o < uh; o <<= 1) f += __shfl_xor_sync(0xffffffffu, f, o);
        if (i < n && k == 0) pk_acc_red(acc + r, (u32)uh, f);
    }
}

#endif

// The head's attention by attend's ATT_THREADS threads: on the staged copy of its kv head's keys
// and values (ks, vs) or on the cache; its output into rq.
__device__ __forceinline__ void pk_attend(const PkStep& st, const PkArgs& a, const float* qs, const u16* ks, const u16* vs,
                                          bool staged, int kvh, int kv_dim, int v_dim, float* rq) {
    const int hd = PK_A_HD(a), hdv = PK_A_HDV(a);
    if (PK_SKIPS(a, PK_SKIP_ATTN)) {
        // Measurement: the head's output is its roped q.
    }
#ifdef PK_SHORT
    // Built for short caches (PkBuild::short): every position in one staged tile, which the host
    // launches it for only (Persistent::launch); attend's single tile.
    else if (PK_KSWZ(a)) attend<u16, true, PK_HD_T, PK_HDV_T, true>(qs, ks, vs, a.pos + 1, 0, hd, hdv, hd, hdv, a.scale, rq);
    else attend<u16, false, PK_HD_T, PK_HDV_T, true>(qs, ks, vs, a.pos + 1, 0, hd, hdv, hd, hdv, a.scale, rq);
#else
    else if (staged && PK_KSWZ(a)) attend<u16, true, PK_HD_T, PK_HDV_T>(qs, ks, vs, a.pos + 1, 0, hd, hdv, hd, hdv, a.scale, rq);
    else if (staged) attend<u16, false, PK_HD_T, PK_HDV_T>(qs, ks, vs, a.pos + 1, 0, hd, hdv, hd, hdv, a.scale, rq);
    else attend<u16, false, PK_HD_T, PK_HDV_T>(qs, st.kc, st.vc, a.pos + 1, kvh, kv_dim, v_dim, hd, hdv, a.scale, rq);
#endif
}

// Rope of q and k, the store of k and v at a.pos (every block of a kv group writes the same
// bytes), then attention over positions 0 ..= pos; one head per block. False when the kernel must
// stop.
__device__ bool pk_attention(const PkStep& st, const PkBlk& blk, const PkArgs& a, float* sm, float* xraw, const float* cs,
                             u8* bufs, int step) {
    const int hd = PK_A_HD(a), hdv = PK_A_HDV(a), nh = PK_A_NH(a), nkv = PK_A_NKV(a);
    int kv_dim = nkv * hd, v_dim = nkv * hdv;
    int voff;
    const bool staged = pk_kv_staged(st, a, voff);
#ifdef PK_SHORT
    if (!staged || a.pos + 1 > ATT_TILE) {
        // Launched for a cache it was not built for: stop, and say so (the host then decodes on
        // the graph path).
        if (threadIdx.x == 0) atomicCAS(a.err, 0u, PK_ERR_SHORT | (u32)(step + 1));
        return false;
    }
#endif
    u16* ks = (u16*)bufs;  // staged: keys then values of positions 0 ..= pos, one row each
    u16* vs = (u16*)(bufs + voff);
    float* rq = sm;          // hd: the head's raw q; then the head's output
    float* rk = sm + 256;    // hd: raw k of its kv head
    float* qs = sm + 512;    // hd: rotated q
    float* rv = sm + 768;    // hdv: v of its kv head
    int half = a.n_rot >> 1;
    const u32 tag = pk_tag(a, step);
    const bool fold = PK_FOLD(st);
    const int h0 = pk_att_head(st, nh);
    for (int h = h0; h < nh; h += fold ? nh : gridDim.x) {
        int kvh = h / (nh / nkv);
        // Value offsets of the head's q and its kv head's k and v in their buffers.
        const size_t at[3] = {(size_t)h * hd, (size_t)kvh * hd, (size_t)kvh * hdv};
        const float* src[3] = {st.q, st.k, st.v};
        LlSeg segs[3] = {{(const u64*)src[0] + at[0], rq, hd}, {(const u64*)src[1] + at[1], rk, hd},
                         {(const u64*)src[2] + at[2], rv, hdv}};
        if (PK_IN_LL(st)) {
#ifdef PK_FUSEQKV
            if (!pk_fused_poll(st, a, segs, xraw, step)) return false;
#else
            if (!pk_load_ll<0, PK_ATT_POLL_U>(a, segs, 3, pk_tag(a, st.in_step), step)) return false;
#endif
        } else {
            if (h == h0 && !pk_wait(a, st.in_step, step)) return false;
            for (int j = 0; j < 3; j++)
                for (int d = threadIdx.x; d < segs[j].n; d += PK_THREADS) segs[j].dst[d] = __ldcg(src[j] + at[j] + d);
            __syncthreads();
        }
        if (h == h0) {
            pk_stamp_arrive(a);
            pk_stamp_m(a, 5);
            pk_delay(a, st, step, PK_DELAY_IN);
            pk_next_l2(st, blk, step, a.nsteps);
        }
#ifdef PK_FUSEQKV
        if (st.prep == PK_PREP_FUSED) pk_fused_qkv(st, xraw, rq, rk, rv, at, hd, hdv);
#endif
        u16* vd = st.vc + (size_t)a.pos * v_dim + (size_t)kvh * hdv;
        for (int d = threadIdx.x; d < hdv; d += PK_THREADS) {
            u16 h16 = f2h(rv[d]);
            vd[d] = h16;
            if (staged) vs[(size_t)a.pos * hdv + d] = h16;
        }
        u16* kd = st.kc + (size_t)a.pos * kv_dim + (size_t)kvh * hd;
        u16* kds = ks + (size_t)a.pos * hd;
        for (int i = threadIdx.x; i < (hd >> 1); i += PK_THREADS) {
            int p, r;
            rope_idx(i, a.n_rot, a.neox, p, r);
            float q0 = rq[p], q1 = rq[r], k0 = rk[p], k1 = rk[r];
            if (i < half) {
                rope_rot(rq[p], rq[r], cs[2 * i], cs[2 * i + 1], q0, q1);
                rope_rot(rk[p], rk[r], cs[2 * i], cs[2 * i + 1], k0, k1);
            }
            qs[p] = q0;
            qs[r] = q1;
            u16 h0 = f2h(k0), h1 = f2h(k1);
            kd[p] = h0;
            kd[r] = h1;
            if (staged) {
                if (PK_KSWZ(a)) {
                    kds[key_swz_at(p, a.pos)] = h0;
                    kds[key_swz_at(r, a.pos)] = h1;
                } else {
                    kds[p] = h0;
                    kds[r] = h1;
                }
            }
        }
        if (staged) cp_wait<0>();
        __syncthreads();
        pk_stamp(a, 1);
        pk_stamp(a, 2);
        // The head's output: rq, or for the fold the quantized row's place (xq_off, at least 4 KB
        // up: above this step's scratch, and written by the next step only after the full barrier
        // that ends its input, which waits for every thread of the block and so for the fold's
        // last read here; the next step's pollers write its input from sm itself as it arrives,
        // while this block's last warps may still be folding: PK_STEP_END).
        float* ro = rq;
#ifdef PK_FOLD_WO
        if (fold) ro = (float*)((u8*)sm + a.xq_off);
#endif
        if (threadIdx.x < ATT_THREADS) {
            // The same arithmetic on the staged copy (rows of one kv head) or on the cache.
            pk_attend(st, a, qs, ks, vs, staged, kvh, kv_dim, v_dim, ro);
        }
        __syncthreads();
        pk_stamp_m(a, 7);
#ifdef PK_FOLD_WO
        if (fold) {
            pk_delay(a, st, step, PK_DELAY_FOLD);
            pk_fold_wo(st, blk, a, ro, h, step);
            break;
        }
#endif
        for (int d = threadIdx.x; d < hdv; d += PK_THREADS) pk_out(st, st.out, h * hdv + d, rq[d], tag);
        if (h + (int)gridDim.x < nh) __syncthreads();  // rq is reloaded for the block's next head
    }
    return true;
}

__device__ __forceinline__ void pk_body(const PkArgs& a) {
    extern __shared__ float4 pk_smem4[];
    float* sm = (float*)pk_smem4;
    float* nw = (float*)((u8*)pk_smem4 + a.xs_bytes);
    float* xraw = (float*)((u8*)pk_smem4 + a.xs_bytes + a.nw_bytes);
    u8* bufs = (u8*)pk_smem4 + a.xs_bytes + 2 * a.nw_bytes;
    // Step records in a ring of four slots (step s in slot s % 4): step s + 2's is loaded into a
    // register of each of the first 64 threads while step s runs (one 4-byte word a thread) and
    // stored into its slot as step s ends, so no step waits on its own record. That slot held
    // step s - 2's, which every thread finished with before the barrier that ended step s - 1;
    // the barrier ending step s makes the new record visible.
    // The block's table entries (PkBlk) ride in a ring beside them, loaded by threads W .. W + WB.
    __shared__ PkStep sts[4];
    __shared__ PkBlk blks[4];
    constexpr int W = (int)(sizeof(PkStep) / 4), WB = (int)(sizeof(PkBlk) / 4);
    static_assert(W + WB <= PK_THREADS, "a step record and a table entry: a word a thread");
    const int tb = (int)threadIdx.x - W;  // this thread's word of a table entry, if 0 <= tb < WB
    // cos, sin of every rotated pair at this position, as rope_pair computes them.
    __shared__ float cs[256];
    for (int i = threadIdx.x; i < (a.n_rot >> 1); i += PK_THREADS) rope_cs(i, a.pos, a.freqs, cs[2 * i], cs[2 * i + 1]);
    for (int j = 0; j < 2 && j < a.nsteps; j++)
        if (threadIdx.x < W) ((u32*)&sts[j])[threadIdx.x] = __ldg((const u32*)(a.steps + j) + threadIdx.x);
        else if (tb < WB) ((u32*)&blks[j])[tb] = __ldg((const u32*)(a.blks + (size_t)j * gridDim.x + blockIdx.x) + tb);
    __syncthreads();
    for (int s = 0; s < a.nsteps; s++) {
        const PkStep& st = sts[s & 3];
        const PkBlk& d = blks[s & 3];
        const bool ld = (int)threadIdx.x < W + WB && s + 2 < a.nsteps;
        const u32* from = (int)threadIdx.x < W ? (const u32*)(a.steps + s + 2) + threadIdx.x
                                               : (const u32*)(a.blks + (size_t)(s + 2) * gridDim.x + blockIdx.x) + tb;
        u32 next2 = ld ? __ldg(from) : 0u;
#ifdef MOLLA_X_PKMEASURE
        u64 g0 = PK_TRACING(a) ? global_ns() : 0;
        pk_stamp(a, 4);
#endif
        PkCursor staged = pk_stage(st, d, a, nw, bufs);
#if defined(PK_FUSEQKV) && defined(MOLLA_X_FUSEL2)
        if (s + 1 < a.nsteps) pk_fused_l2(sts[(s + 1) & 3], blks[(s + 1) & 3]);
#endif
#ifndef MOLLA_X_PKMEASURE
        u64 g0 = PK_TRACING(a) ? global_ns() : 0;
#endif
        pk_delay(a, st, s, PK_DELAY_PRE);
        pk_stamp(a, 0);
        pk_stamp(a, 1);
        pk_stamp(a, 2);
        pk_stamp_arrive(a);
        pk_stamp_m(a, 5);
        pk_stamp_m(a, 7);
        bool ok = st.op == PK_OP_MATVEC ? pk_matvec(st, d, a, sm, nw, xraw, bufs, staged, s)
                                        : pk_attention(st, d, a, sm, xraw, cs, bufs, s);
        if (!ok) {
            cp_wait<0>();
            return;
        }
        if (st.arrive) pk_arrive(a.counters + s);
        if (ld) {
            if ((int)threadIdx.x < W) ((u32*)&sts[(s + 2) & 3])[threadIdx.x] = next2;
            else ((u32*)&blks[(s + 2) & 3])[tb] = next2;
        }
        // The step's end: its chunk buffers, input row and record are free, step s + 2's
        // record is visible (ENDARRIVE: see PK_STEP_END).
        PK_STEP_END(PK_END_FULL(st));
        if (PK_TRACING(a)) {
            if (threadIdx.x == 0) {
                u64* t = a.trace + 8 * ((size_t)s * gridDim.x + blockIdx.x);
                long long c = clock64();
                t[0] = g0;
                t[1] = global_ns();
#ifdef MOLLA_X_PKMEASURE
                // SM cycles: staging, the wait, the RMSNorm sum, the rest of the input's
                // preparation, waiting for the first weights, the rows; the end's ns in t[1].
                const long long* p = pk_stamps;
                t[2] = (u64)(p[0] - p[4]);
                t[3] = (u64)(p[3] - p[0]);
                t[4] = (u64)(p[5] - p[3]);
                t[5] = (u64)(p[1] - p[5]);
                t[6] = (u64)(p[2] - p[1]);
                t[7] = (u64)(p[7] - p[2]);
                (void)c;
#else
                t[2] = (u64)(pk_stamps[1] - pk_stamps[0]);
                t[3] = (u64)(pk_stamps[2] - pk_stamps[1]);
                t[4] = (u64)(c - pk_stamps[2]);
#endif
            }
        }
    }
    // The folded wo's accumulators, zeroed for the next launch: every block has read them (each
    // block's last step waited for rows every block computed after its reads).
#ifdef PK_FOLD_WO
    for (int i = blockIdx.x * PK_THREADS + threadIdx.x; i < a.fold_n; i += gridDim.x * PK_THREADS) a.fold_acc[i] = 0;
#endif
}

// One block an SM (the host sizes the grid so): all registers are the block's. The kernel built
// for a model's types (PK_TYMASK) says so, or ptxas holds it to 128 registers and spills.
#ifdef PK_TYMASK
#define PK_BOUNDS __launch_bounds__(PK_THREADS, 1)
#else
#define PK_BOUNDS __launch_bounds__(PK_THREADS)
#endif
extern "C" __global__ void PK_BOUNDS decode_persistent(const PkArgs a) { pk_body(a); }
