// Experiment WIDEASYNC (MOLLA_KDEFS=WIDEASYNC; launch.rs `wide_async_on`): matvec_wide with each
// warp's weights streamed into shared memory by cp.async, `stages` rounds ahead of its row dots.
//
// matvec_wide loads a unit's weights into registers when its lane reaches it, so a warp has one
// unit's bytes in flight at a time (two round trips a 4096-wide Q4_K row, one after the other),
// and the first ones only after the input's copy. Here a warp walks its rows as rounds of 32
// units (a lane's unit u = 32 k + lane in round k, as row_dot_q16_one's loop takes them: 8 K-quant
// superblocks, or 32 legacy blocks), copies each round's bytes into a slot of its own ring with
// cp.async (no registers held) and computes round n while rounds n + 1 .. n + stages - 1 are in
// flight; the first rounds are asked for before the input's copy (the weights depend on no
// kernel before). A lane computes the same units in the same order with the shared-memory
// decoders (unit_q16<T>, whose bits are unit_q16<T, true>'s: scripts/cuda_host_check.py), so the
// rows have matvec_wide's bits.
//
// Rows must start 16-byte aligned (row_bytes and the matrix's address multiples of 16: every
// round's start then is, as 32 legacy blocks and 8 superblocks of every q16 format are whole
// multiples of 16 bytes); the host checks this and that the rows are not fixed-point ones.

// Bytes of a round (32 units) of format T.
template <int T>
__device__ constexpr int wa_round_bytes() {
    if constexpr (T == T_Q4_K) return 8 * 144;
    else if constexpr (T == T_Q5_K) return 8 * 176;
    else if constexpr (T == T_Q6_K) return 8 * Q6K_BYTES;
    else return 32 * legacy_bytes<T>();
}

__device__ __forceinline__ int wa_round_bytes_ty(int ty) {
#define WA_RB(T) return wa_round_bytes<T>()
    Q16_DISPATCH(ty, WA_RB)
#undef WA_RB
    return 0;
}

// Units of a `cols`-wide row of type ty (q16_units).
__device__ __forceinline__ int wa_units(int ty, int cols) {
    return ty == T_Q4_K || ty == T_Q5_K || ty == T_Q6_K ? cols >> 6 : cols >> 5;
}

// A warp's place in its work: the block's trip rb (mv_row: the warp's row is rb + its index),
// that row's segment si and row r there, round k of the row; ok: not past the last row.
struct WaPos {
    int rb, si, r, k;
    bool ok;
};

__device__ __forceinline__ void wa_seek(const MvArgs& a, WaPos& p) {
    p.ok = mv_row(a, p.rb, 32, p.si, p.r);
    p.k = 0;
}

// The next round: the row's next, else round 0 of the warp's row in the block's next trip
// (stride rows on).
__device__ __forceinline__ void wa_next(const MvArgs& a, WaPos& p, int stride) {
    if (!p.ok) return;
    if (32 * (p.k + 1) < wa_units(a.seg[p.si].ty, a.cols)) {
        p.k++;
        return;
    }
    p.rb += stride;
    wa_seek(a, p);
}

// The copy of round p into the slot at shared address `slot`, by the warp's lanes, as one
// cp.async group (empty past the last row, so that every lane counts the same groups).
__device__ __forceinline__ void wa_issue(const MvArgs& a, const WaPos& p, u32 slot, int lane) {
    if (p.ok) {
        const MvSeg& s = a.seg[p.si];
        int rb = wa_round_bytes_ty(s.ty), off = p.k * rb;
        int n16 = min(rb, s.row_bytes - off) >> 4;
        const u8* src = s.w + (size_t)p.r * s.row_bytes + off;
        for (int i = lane; i < n16; i += 32) cp_async16(slot + 16 * i, src + 16 * i);
    }
    cp_commit();
}

// Waits until at most n (0 .. 7) of this thread's newest cp.async groups are pending.
__device__ __forceinline__ void wa_wait(int n) {
    switch (n) {
        case 0: cp_wait<0>(); break;
        case 1: cp_wait<1>(); break;
        case 2: cp_wait<2>(); break;
        case 3: cp_wait<3>(); break;
        case 4: cp_wait<4>(); break;
        case 5: cp_wait<5>(); break;
        case 6: cp_wait<6>(); break;
        default: cp_wait<7>(); break;
    }
}

// Round k of a row of type T, its bytes at `slot`: the lane's unit added to acc, as
// row_dot_q16_one adds it.
template <int T>
__device__ __forceinline__ void wa_round(const u8* slot, int k, const Xq& xq, int cols, int lane, float& acc) {
    int u = 32 * k + lane;
    if (u < q16_units<T>(cols)) {
        int4 xr[8];
        load_xu<T>(xq, u, xr);
        // unit_q16 finds unit u at its offset in the row: the row's start, as seen from the slot.
        acc = __fadd_rn(acc, unit_q16<T>(slot - (size_t)k * wa_round_bytes<T>(), xr, xq, u));
    }
}

// wa_round by weight type (NaN for a type q16.cuh does not decode, which the host never passes).
__device__ __forceinline__ void wa_round_ty(int ty, const u8* slot, int k, const Xq& xq, int cols, int lane,
                                            float& acc) {
#define WA_ROUND(T) wa_round<T>(slot, k, xq, cols, lane, acc)
    Q16_DISPATCH(ty, WA_ROUND)
#undef WA_ROUND
    acc = __int_as_float(0x7fc00000);
}

// a's rows (q16 formats, no fixed-point rows) on the input matvec_prep_wide prepared at `prep`,
// a warp a row, 32 lanes; shared memory: the quantized input (xq_bytes(cols)), then each warp's
// ring of `stages` (2 .. 8) slots of `slot_bytes` (a multiple of 16, at least the largest round
// of the segments' formats).
MOLLA_KERNEL void __launch_bounds__(256, 4) matvec_wide_async(const MvArgs a, const u8* prep, int stages,
                                                                int slot_bytes) {
    extern __shared__ float4 smem4[];
    pdl_trigger();
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, stride = gridDim.x * warps;
    u8* ring = (u8*)smem4 + xq_bytes(a.cols) + (threadIdx.x >> 5) * stages * slot_bytes;
    const u32 ring_s = smem_u32(ring);
    WaPos in;
    in.rb = blockIdx.x * warps;
    wa_seek(a, in);
    WaPos at = in;
    for (int d = 0; d < stages - 1; d++) {
        wa_issue(a, in, ring_s + d * slot_bytes, lane);
        wa_next(a, in, stride);
    }
    pdl_wait();
    const Xq xq = prep_xq(a, prep, smem4);
    const float scale = prep_scale(a, prep);
    float acc = 0.f;
    // Slot of the round computed now; the copy issued now goes to the one before it (computed
    // in the previous trip, whose reads the __syncwarp at that trip's end ordered before it).
    int cur = 0;
    while (at.ok) {
        wa_issue(a, in, ring_s + (cur == 0 ? stages - 1 : cur - 1) * slot_bytes, lane);
        wa_next(a, in, stride);
        wa_wait(stages - 1);
        __syncwarp();
        const MvSeg& s = a.seg[at.si];
        const u8* slot = ring + cur * slot_bytes;
        wa_round_ty(s.ty, slot, at.k, xq, a.cols, lane, acc);
        __syncwarp();
        if (32 * (at.k + 1) >= wa_units(s.ty, a.cols)) {
            acc = warp_sum(acc);
            if (lane == 0) mv_store(s, 0, at.r, mv_scaled(acc, scale));
            acc = 0.f;
        }
        cur = cur + 1 == stages ? 0 : cur + 1;
        wa_next(a, at, stride);
    }
    cp_wait<0>();
}
