// The persistent decode kernel's step list (PkStep, PkArgs) and how its steps hand values to
// each other (tagged words, counters, bounded waits); the kernel itself is persistent.cu.
//
// One launch a token: a persistent decode kernel. Every block stays resident for the whole step
// (the host sizes the grid by an occupancy query) and walks the same device-resident list of steps
// (PkStep, built once per cache on the host). Only position, token and a tag base change per
// token, and they are kernel arguments.
//
// Steps hand their outputs to each other through tagged buffers (as NCCL's low-latency protocol
// does): each value is stored as one 8-byte word, the f32 bits and a 32-bit tag, the tag naming
// the step and launch that wrote it (tag_base + step + 1; tags never repeat before the host
// zeroes the buffers). A reader polls the words it needs until each carries the tag of the step
// that produces them, so such a hand-over needs no barrier, fence or counter: a block
// waits for exactly the values it reads (an attention block for its head's q, k, v rows), and the
// wait and the load are one round trip. Words are stored and loaded with 8- or 16-byte accesses
// (relaxed at GPU scope; MOLLA_KDEFS=LLVOL: volatile), which the GPU performs whole, so a value is never seen without its tag. A writer
// overwrites a buffer only after reading an input that every reader of the old contents helped
// produce (each step's input depends on all of the previous step), so no reader can miss a value.
// Wide vectors (the 8B's 14336-value FFN row) cost twice their bytes in tagged form and every
// block reads them whole: above a width the host picks, a step writes plain f32 and every block
// then adds 1 to a per-step counter (release); readers wait for epoch * blocks (acquire) and
// load the plain row.
//
// The work of a step is split by block: a matvec's rows in contiguous ranges (the block prepares
// the input once, each warp takes rows), attention by head. Each op computes exactly what the
// graph-replayed kernels compute (same device functions, same reduction orders), so both paths
// give the same bits.
//
// Weights of a matvec step pass through shared memory (see pk_stage): the copies for step s are
// issued before its input is ready, and later chunks are prefetched into L2 ahead of their copy.
//
// Safety: every wait is bounded (timeout_ms, on the global timer) and checks the error word; a
// timeout stores 1 + the step index there and every block returns. The host reads the word with
// the logits and falls back to the graph path.

// Threads a block: 256, or as the host builds the kernel for a model (PK_NTHREADS, compile.rs
// PkBuild::threads: 384 when its gate/up pairs would take more than two rounds of eight warps,
// Qwen2.5-0.5B's 37 a block on 132 SMs: measured +1-2% tokens/s there, level or -1% on
// SmolLM2's 11.6, session 31), or as an experiment asks (MOLLA_KDEFS=PKT=N, a multiple of 32).
// The kernel must still fit the registers its launch bounds leave (65536 / PK_THREADS: 384
// threads hold its 160 without spills).
#if defined(MOLLA_X_PKT)
#define PK_THREADS (MOLLA_X_PKT)
#define PK_WARPS ((MOLLA_X_PKT) / 32)
#elif defined(PK_NTHREADS)
#define PK_THREADS (PK_NTHREADS)
#define PK_WARPS ((PK_NTHREADS) / 32)
#else
#define PK_THREADS 256
#define PK_WARPS 8
#endif
// Threads that poll a step's input (pk_load_ll, pk_load_acc): the first 128, while the others
// issue the step's weight copies (pk_stage), so that a block whose input is already there when it
// starts a step (the one that ended the step before last: the others wait for its values) does
// not pay the staging and then a round trip one after the other (session 32: +0.7-2% tokens/s on
// the SmolLM2 and Qwen shapes). In a chunked build the first 128 still copy the RMSNorm weights
// they quantize; in a packed one the stagers copy them all (POLLFIRST below).
// MOLLA_KDEFS=NOSPLIT (a measurement): every thread stages, then every thread polls.
#ifndef MOLLA_X_NOSPLIT
#define PK_POLLERS 128
#define PK_STAGER(t) ((int)(t) >= PK_POLLERS)
#define PK_STAGE_T0 PK_POLLERS
#define PK_STAGE_OK(i) ((i) >= 0)
#define PK_POLLER(t) ((int)(t) < PK_POLLERS)
#else
#define PK_POLLERS PK_THREADS
#define PK_STAGER(t) true
#define PK_STAGE_T0 0
#define PK_STAGE_OK(i) true
#define PK_POLLER(t) true
#endif
// POLLFIRST (session 47's default; first MOLLA_KDEFS=POLLFIRST, off: MOLLA_KDEFS=NOPOLLFIRST): in
// a packed build the pollers skip pk_stage and poll at once; the stagers copy the RMSNorm weights
// (all of them) and wait for them before the input's barrier. With ENDARRIVE below, H100, real
// files, tg128, two rounds: SmolLM2 Q4_1 2775, 2781 against 2720, 2734; Q8_0 2588, 2592 against
// 2582, 2591; Qwen2.5 Q4_K_M 2123, 2144 against 2099, 2091 (POLLFIRST alone 2768, 2766; 2603,
// 2615; 2117, 2123).
#if !defined(MOLLA_X_NOPOLLFIRST) && defined(PK_PACKED_ONLY) && !defined(MOLLA_X_NOSPLIT)
#define PK_POLL_FIRST 1
#else
#define PK_POLL_FIRST 0
#endif
// The barrier ending a step. ENDARRIVE (session 47's default; first MOLLA_KDEFS=ENDARRIVE, off:
// MOLLA_KDEFS=NOENDARRIVE): only the stagers wait there (bar.sync on barrier 2), before they stage
// the next step over this one's chunk buffers; the pollers arrive and go on to the next step's
// input, while the block's last warps finish their rows. Nothing else a step reads late is
// written before the next step's input barrier: the polled input (xs from 0) lies below the
// quantized row (xq_off) the rows read, the norm weights and xraw are read before a step's rows,
// and the record ring's slot s + 2 % 4 held a step every thread has left. Packed builds only (in
// the chunked path every thread copies rows), and only those for q16 types alone (PK_TYMASK):
// rows of other formats read the f32 row in xs itself (pk_input), which the next step's poll
// overwrites (the model suite's Q3_K model failed so, session 47).
// A step in which a block has no work has no barrier of its own, so it ends with the full one
// (`full`): else a poller could arrive twice on barrier 2 before the stagers' one sync, and read
// the next step's record before the threads storing it (as the step before ended) had done so
// (MOLLA_WO_FOLD=0 on the real Qwen2.5 file timed out so, and the persistent suite hung with it,
// session 48). Every block has rows in every matvec step (Persistent::new sizes the grid so) and
// a head in every folded attention step, but an unfolded one leaves blocks n_head and up without
// one: in builds without the fold, attention steps end with the full barrier (PK_END_FULL).
#if !defined(MOLLA_X_NOENDARRIVE) && defined(PK_PACKED_ONLY) && defined(PK_TYMASK) && !defined(MOLLA_X_NOSPLIT)
#define PK_STEP_END(full)                                                                  \
    do {                                                                                  \
        if (full) __syncthreads();                                                        \
        else if (PK_STAGER(threadIdx.x)) asm volatile("bar.sync 2, %0;" ::"n"(PK_THREADS) : "memory"); \
        else asm volatile("bar.arrive 2, %0;" ::"n"(PK_THREADS) : "memory");                 \
    } while (0)
#else
#define PK_STEP_END(full) __syncthreads()
#endif
#ifdef PK_FOLD_WO
#define PK_END_FULL(st) false
#else
#define PK_END_FULL(st) ((st).op != PK_OP_MATVEC)
#endif
// Threads that reduce an RMSNorm sum of squares: the decode matvec's block size, so the f64 sum
// is added in the same order as there.
#define PK_NORM_THREADS 128

// Most chunk buffers a block cycles through (cp.async groups in flight).
#define PK_MAX_STAGES 4

#define PK_OP_MATVEC 0
#define PK_OP_ATTN 1
// Attention with the layer's wo folded in. Block b takes head b % n_head (each head's blocks
// repeat its attention), then its share of wo's rows over that head's columns, and adds each
// unit's product into the layer's accumulator row (PkStep::y[0], a u64 word a value: fixed point
// and a count of adds, see pk_acc_add). The next step (PK_PREP_FOLD_RMSNORM) polls the words
// until each counts every unit of its row, and takes x + the accumulator as its input. Legacy
// q16 formats only (a unit of 32 columns).
#define PK_OP_ATTN_WO 2
// Only a kernel built with PK_FOLD_WO (compile.rs PkBuild::fold) has the fold's code (the host
// builds such lists only then).
#ifdef PK_FOLD_WO
#define PK_FOLD(st) ((st).op == PK_OP_ATTN_WO)
#define PK_FOLD_INPUT(st) ((st).prep == PK_PREP_FOLD_RMSNORM)
#else
#define PK_FOLD(st) false
#define PK_FOLD_INPUT(st) false
#endif

// Measurement knobs (PkArgs::knobs, MOLLA_PK_SKIP): leave a stage's work out, keep its
// hand-over. Rows: matvec steps store 0 (or the residual) without weights or row dots. Attention:
// the head's output is its roped q, without the cached keys and values. Prep (with rows): the
// matvec input is loaded but not normalised or quantized.
#define PK_SKIP_ROWS 1
#define PK_SKIP_ATTN 2
#define PK_SKIP_PREP 4
// Weights: matvec rows are computed on whatever the chunk buffers hold (no copies, no L2
// prefetch; the cp.async groups are still committed, empty). Dots: the weights are copied and
// waited for, the rows store 0 (or the residual) instead of their dots.
#define PK_SKIP_FETCH 8
#define PK_SKIP_DOT 16
// Only in a kernel built with MOLLA_KDEFS=PKMEASURE (as the trace's arrive stamp): the default
// kernel has none of this code, which measured 4-6% slower decode on the H200 when always in.
#ifdef MOLLA_X_PKMEASURE
#define PK_SKIPS(a, bit) (((a).knobs & (bit)) != 0)
#define pk_stamp_arrive(a) pk_stamp(a, 3)
// The measurement build's finer trace (see pk_body): 4 the step's start, before its staging;
// 5 after the RMSNorm's sum; 7 after the rows (or the attention).
#define pk_stamp_m(a, k) pk_stamp(a, k)
#else
#define PK_SKIPS(a, bit) false
#define pk_stamp_arrive(a) ((void)0)
#define pk_stamp_m(a, k) ((void)0)
#endif

#define PK_PREP_PLAIN 0
#define PK_PREP_RMSNORM 1
// The embedding row of the token, then RMSNorm (every block looks it up).
#define PK_PREP_EMBED_RMSNORM 2
// x + a PK_OP_ATTN_WO step's accumulator (pk_load_acc; emb_rows: the adds a complete word
// counts), x being the raw row this block's last RMSNorm step kept, then RMSNorm.
#define PK_PREP_FOLD_RMSNORM 3
// An attention step whose q, k and v the down step before made unscaled (PK_FUSEQKV, crate::fused):
// it polls the residual row x (emb_rows values) after them, into the raw row (xraw), and applies
// RMSNorm's scale and the biases.
#define PK_PREP_FUSED 4

struct PkStep {
    const u8* w[3];
    const float* bias[3];
    float* y[3];
    const float* x;
    const float* norm_w;
    const u8* emb;
    // attention: raw q, k, v of this token, the layer's caches, the output
    const float* q;
    const float* k;
    const float* v;
    u16* kc;
    u16* vc;
    float* out;
    int rows[3];
    int row_bytes[3];
    int ty[3];
    int accumulate[3];
    int op;
    int prep;
    int pair;  // segments 0 and 1 have the same rows: y0 = silu(W0·x) * (W1·x)
    int nseg;
    int cols;
    int total;  // rows of the step (pair: of one segment)
    int emb_ty;
    int emb_rows;
    int emb_row_bytes;
    float eps;
    int res_smem;  // accumulate onto the raw input row the previous RMSNorm step of this block
                   // loaded (xraw in shared memory); the only accumulation the kernel does
    int in_step;   // the step whose output is this step's input (-1: none)
    int out_ll;    // 1: outputs are tagged words; 0: plain f32
    int in_ll;     // 1: the input is tagged words; 0: plain f32, ready once counters[in_step]
                   // has every block's arrival
    int arrive;    // 1: every block adds 1 to counters[this step] when done with it
    int packed;    // 1: a block's rows fit its chunk buffers whole: copied at once, segment after
                   // segment, as the step begins (one cp.async group)
};

// A block's share of a packed matvec step (PkStep::packed), worked out once on the host
// (crates/cuda/src/persistent/blocks.rs) as pk_rows, pk_seg_chunk, pk_span and pk_row would on
// every step: its rows, the spans of global memory its copy reads, and where its chunks land.
// Table PkArgs::blks, step-major (step s, block b at s * gridDim.x + b); zero for other steps.
struct PkBlk {
    // The block's copy is its spans back to back from the chunk buffers' start, in 16-byte
    // units: unit i (< end[2]) is span k's (the first k with i < end[k]) and reads src[k] + 16 i
    // (src[k]: the span's 16-byte-aligned start less 16 times the units before it).
    const u8* src[3];
    int end[3];
    int r0, r1;    // the block's rows of the step (a folded attention step: of its wo)
    int nch;       // chunks: one a segment with rows (pair steps: one, both matrices)
    int seg[3];    // chunk k: segment, rows [ra, rb) of it
    int ra[3];
    int rb[3];
    int row0[3];   // byte offset in the buffers of chunk k's row ra (at its address mod 16)
    int row1;      // pair steps: the byte offset of the second matrix's row ra
    int pad[3];
};

struct PkArgs {
    const PkStep* steps;
    const PkBlk* blks;
    u32* err;
    const double* freqs;
    u64* trace;    // measurement, or null: per step and block, 8 words: global-timer ns when the
                   // step starts (weights issued) and ends; SM cycles spent on the input (its
                   // wait included), waiting for the first weights, and on the rest; then SM
                   // cycles from the start until the input had arrived (the wait alone; only
                   // with MOLLA_X_PKMEASURE, else 0). MOLLA_X_PKMEASURE has a finer layout:
                   // see the end of pk_body
    u32* counters; // per step: arrivals, for steps with plain outputs (epoch * gridDim.x when done)
    int nsteps;
    u32 token;
    int pos;
    u32 tag_base;  // tag of step s's outputs: tag_base + s + 1
    u32 epoch;     // launches since the counters were zeroed
    int n_head;
    int n_head_kv;
    int hd;
    int hdv;
    int n_rot;
    int neox;
    float scale;
    u32 timeout_ms;
    int chunk;     // bytes of weights per shared-memory chunk (stages buffers of chunk + 64 bytes)
    int xs_bytes;  // shared memory before the chunk buffers (the input row)
    int knobs;     // measurement: bits 8..15: ns to sleep between polls (0: spin); bits 0..2:
                   // PK_SKIP_* (stages left out, to take time differences)
    int nw_bytes;  // shared memory after the input row for the RMSNorm weights, then as much for
                   // the raw (unnormalised) input row
    int xq_off;    // shared memory offset of the quantized input row (q16.cuh)
    int stages;    // chunk buffers (1 .. PK_MAX_STAGES), each chunk + 64 bytes, after the raw row
    int l2_ahead;  // chunks of a block's rows prefetched into L2 beyond those in shared memory
    long long* fold_acc;  // the PK_OP_ATTN_WO steps' accumulators (fold_n values), or null: each
    int fold_n;           // block zeroes its share as it ends, for the next launch
    const u32* tok_src;   // or null: the token is the greedy pick of the step before, in the pick
                          // kernel's words (pick.cu: status, then index), written by a launch
                          // earlier on the stream (greedy decoding chained on the device,
                          // forward/chain.rs); a bad pick's status gives no token
};

// The token this launch decodes: the argument, or the pick at tok_src (none: all ones, past
// every embedding row, when the pick was not a token).
__device__ __forceinline__ u32 pk_token(const PkArgs& a) {
    if (!a.tok_src) return a.token;
    return __ldcg(a.tok_src) == 0 ? __ldcg(a.tok_src + 1) : 0xffffffffu;
}

#ifdef MOLLA_X_PKMEASURE
__shared__ long long pk_stamps[8];
#else
__shared__ long long pk_stamps[4];
#endif

// Whether this launch traces (PkArgs::trace): only the measurement build (PKMEASURE) has the
// trace's code, whose stamps are ~20 issued instructions a warp and step even when off
// (predicated; the four session 17 experiments together measured +9% tokens/s on the SmolLM2
// Q4_1 shape with them left out, session 18).
#ifdef MOLLA_X_PKMEASURE
#define PK_TRACING(a) ((a).trace != nullptr)
#else
#define PK_TRACING(a) false
#endif

// Measurement (MOLLA_PK_DELAY, PkArgs::knobs bits 16..31; the measurement build only): every
// thread of every block spins for a while at one point of the steps of some kinds, so that how
// much the token slows tells how much of that point's time lies on its critical path (a causal
// profile). Bits 16..20: the kinds (1 q/k/v, 2 attention, 4 gate/up, 8 down, 16 the head);
// 21..22: where (0 before the wait for the input, after the staging; 1 once the input is in;
// 2 attention only: after the attention, before the folded wo); 24..31: the time, in units of
// 32 SM cycles.
#ifdef MOLLA_X_PKMEASURE
#define PK_DELAY_PRE 0
#define PK_DELAY_IN 1
#define PK_DELAY_FOLD 2
__device__ __forceinline__ void pk_delay(const PkArgs& a, const PkStep& st, int s, int where) {
    const u32 k = (u32)a.knobs, cycles = (k >> 24) * 32u;
    if (cycles == 0 || (int)((k >> 21) & 3u) != where) return;
    int kind;
    if (st.op != PK_OP_MATVEC) kind = 2;
    else if (st.pair) kind = 4;
    else if (st.prep == PK_PREP_PLAIN) kind = 8;
    else kind = s == a.nsteps - 1 ? 16 : 1;
    if ((((k >> 16) & 31u) & (u32)kind) == 0) return;
    const long long t0 = clock64();
    while (clock64() - t0 < (long long)cycles) {
    }
}
#else
#define pk_delay(a, st, s, where) ((void)0)
#endif

// Trace stamp k of the current step (thread 0, after a barrier): SM clock cycles.
__device__ __forceinline__ void pk_stamp(const PkArgs& a, int k) {
    if (PK_TRACING(a) && threadIdx.x == 0) pk_stamps[k] = clock64();
}

__device__ __forceinline__ u32 ld_relaxed(const u32* p) {
    u32 v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u32 ld_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Whether a wait of step `step` that began at t0 must stop: another block set the error word,
// or the wait ran past timeout_ms (then this one stores 1 + step there).
__device__ __forceinline__ bool pk_give_up(const PkArgs& a, u64 t0, int step) {
    if (*(volatile u32*)a.err != 0u) return true;
    if (global_ns() - t0 > (u64)a.timeout_ms * 1000000ull) {
        atomicCAS(a.err, 0u, (u32)(step + 1));
        return true;
    }
    return false;
}

// Nanoseconds to sleep between polls (0: spin).
__device__ __forceinline__ u32 pk_nap(const PkArgs& a) { return (a.knobs >> 8) & 0xff; }

// Waits until counters[in] has every block's arrival of this launch. False when the kernel must
// stop (error or timeout). Thread 0 polls; the barrier hands what it saw to the whole block.
__device__ bool pk_wait(const PkArgs& a, int in, int step) {
    __shared__ int ok;
    const u32* c = a.counters + in;
    u32 target = a.epoch * gridDim.x;
    if (threadIdx.x == 0) {
        int good = 1;
        if ((int)(ld_acquire(c) - target) < 0) {
            u64 t0 = global_ns();
            u32 nap = pk_nap(a);
            while ((int)(ld_relaxed(c) - target) < 0) {
                if (nap) __nanosleep(nap);
                if (pk_give_up(a, t0, step)) {
                    good = 0;
                    break;
                }
            }
            ld_acquire(c);
        }
        ok = good;
    }
    __syncthreads();
    return ok != 0;
}

// The block's writes so far, released to whoever acquires the counter after this add.
__device__ __forceinline__ void pk_arrive(u32* c) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

__device__ __forceinline__ u32 pk_tag(const PkArgs& a, int step) { return a.tag_base + (u32)step + 1u; }

// Tagged words are loaded and stored relaxed at GPU scope (volatile is relaxed at system scope;
// syncbench measured the GPU scope's hand-over of 1536 values 2.45 -> 2.26 us on the H200).
// MOLLA_KDEFS=LLVOL keeps volatile.
#ifdef MOLLA_X_LLVOL
#define PK_LL_LD "ld.volatile.global.v4.u32"
#define PK_LL_ST "st.volatile.global.v2.u32"
#else
#define PK_LL_LD "ld.relaxed.gpu.global.v4.u32"
#define PK_LL_ST "st.relaxed.gpu.global.v2.u32"
#endif

// Two tagged words (16-byte aligned): {value, tag, value, tag}.
__device__ __forceinline__ uint4 ld_ll2(const u64* p) {
    uint4 v;
    asm volatile(PK_LL_LD " {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ void st_ll(u64* p, float v, u32 tag) {
    asm volatile(PK_LL_ST " [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(tag) : "memory");
}

// After poll round `it` of a wait that began at t0 (taken here after the first) left values
// pending: the nap between polls, and every 64 rounds whether the wait must stop (pk_give_up).
// False when it must.
__device__ __forceinline__ bool pk_poll_on(const PkArgs& a, int it, u64& t0, u32 nap, int step) {
    if (it == 0) t0 = global_ns();
    if (nap) __nanosleep(nap);
    return !((it & 63) == 63 && pk_give_up(a, t0, step));
}

// Up to three tagged vectors (each of even length, 16-byte aligned) are loaded into shared memory
// once every value carries the tag the reader waits for: eight 16-byte loads a thread in flight,
// then a poll of the pairs that were not ready (pk_load_ll). One vector:
struct LlSeg {
    const u64* src;
    float* dst;
    int n;
};

// Pair i of the segments laid end to end (n0, n1 pairs in the first two): segment s, pair j.
// NSEG: the segment count when known at compile time (1: no selection at all), else 0.
template <int NSEG>
__device__ __forceinline__ void ll_pair(int i, int n0, int n1, int& s, int& j) {
    if (NSEG == 1) {
        s = 0;
        j = i;
        return;
    }
    s = i < n0 ? 0 : i < n0 + n1 ? 1 : 2;
    j = i - (s == 0 ? 0 : s == 1 ? n0 : n0 + n1);
}

// The segments are copied to registers and picked by selects: indexing the caller's array by a
// computed segment kept it in local memory (a local load for every pair).
#define PK_SEG(s) ((s) == 0 ? g0 : (s) == 1 ? g1 : g2)

// Pair u (< 8) of the round of pairs starting at rb for this thread: rb + t + P u (P: the
// threads polling, PK_POLLERS unless given).
__device__ __forceinline__ int ll_index(int rb, int u, int P = PK_POLLERS) { return rb + (int)threadIdx.x + u * P; }

// Polls the segments' pairs until each carries `tag` and stores the values (ll_index says which
// pairs a thread takes), then a barrier. NSEG: the segment count when the caller knows it at
// compile time (1 for a matvec step's input, so its pairs need no segment selection), else 0.
// False when the kernel must stop.
// U: pairs a thread takes a round (at most 8; the attention step's q, k, v need far fewer).
template <int NSEG, int U = 8>
__device__ bool pk_load_ll(const PkArgs& a, const LlSeg* segs, int nseg, u32 tag, int step) {
    if (NSEG) nseg = NSEG;
    const LlSeg g0 = segs[0], g1 = nseg > 1 ? segs[1] : segs[0], g2 = nseg > 2 ? segs[2] : segs[0];
    // The nap read once: the polls' loads clobber memory, so `a.knobs` would be reloaded after each.
    const u32 nap = pk_nap(a);
    int n0 = segs[0].n >> 1, n1 = nseg > 1 ? segs[1].n >> 1 : 0, n2 = nseg > 2 ? segs[2].n >> 1 : 0;
    int np = n0 + n1 + n2, ok = 1;
    // (Threads past PK_POLLERS poll nothing when the input takes one round of the pollers: they
    // staged the step's weights meanwhile. A wider input, Qwen's 4864-value SwiGLU row, is polled
    // by every thread, the stagers once they have issued their copies, so that it takes one round
    // trip and not three: session 46, Qwen +3%.)
    const int P = np > U * PK_POLLERS ? PK_THREADS : PK_POLLERS;
    if ((int)threadIdx.x >= P) np = 0;
    for (int rb = 0; rb < np && ok; rb += U * P) {
        // The pairs of this round still without their tag (bit u: pair ll_index(rb, u)). Each
        // poll reloads all of them at once, so a thread waits about one round trip after the
        // last of its pairs was written, not one a pair.
        u32 pend = 0;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (ll_index(rb, u, P) < np) pend |= 1u << u;
        u64 t0 = 0;
        for (int it = 0; pend; it++) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                int s, j;
                ll_pair<NSEG>(ll_index(rb, u, P), n0, n1, s, j);
                if ((pend >> u) & 1) v[u] = ld_ll2(PK_SEG(s).src + 2 * j);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                int s, j;
                ll_pair<NSEG>(ll_index(rb, u, P), n0, n1, s, j);
                if (((pend >> u) & 1) && v[u].y == tag && v[u].w == tag) {
                    PK_SEG(s).dst[2 * j] = __uint_as_float(v[u].x);
                    PK_SEG(s).dst[2 * j + 1] = __uint_as_float(v[u].z);
                    pend &= ~(1u << u);
                }
            }
            if (pend && !pk_poll_on(a, it, t0, nap, step)) {
                ok = 0;
                break;
            }
        }
    }
    return __syncthreads_and(ok) != 0;
}
#undef PK_SEG

// A folded step's accumulator word (PK_OP_ATTN_WO): the sum of its row's unit products in
// fixed point (2^-32, two's complement, |sum| < 2^55 at every point of the adds) plus 2^56 for
// each product added. Integer adds come out the same in any order, and the count rides in the
// word itself, so a reader polls the words it needs, as with tagged words: no counter, no
// fence, one round trip (a counter, then the row: two, and a release that waits for the adds).
#define PK_ACC_ONE (1ull << 56)
#define PK_ACC_HALF (1ull << 55)

// A product a counted word can hold: |v| < 2^15, so that its row's at most 255 products (the
// count's 8 bits) stay below 2^55 in fixed point at every point of the adds (fx_ok's 2^22 would
// let the sum carry into the count). Any other (NaN, an infinity, a larger value) is counted as
// 0 and stops the kernel with PK_ERR_FX | (1 + step) in the error word; the host then runs the
// token on the graph path, whose fixed-point rows hold it (or turn the row into NaN, fx_ok).
#define PK_ERR_FX 0x40000000u
// The kernel built for short caches (PK_SHORT) launched at a position past them: PK_ERR_SHORT |
// (1 + step).
#define PK_ERR_SHORT 0x20000000u

__device__ __forceinline__ bool pk_acc_ok(float v) { return fabsf(v) < 32768.f; }

// A product in the fixed point of a counted word (0, and the error word set, when pk_acc_ok
// refuses it).
__device__ __forceinline__ long long pk_acc_fx(const PkArgs& a, int step, float v) {
    long long f = 0;
    if (pk_acc_ok(v)) f = fx_of(v);
    // (A measurement that leaves stages out (MOLLA_PK_SKIP) folds products of whatever its
    // skipped rows left: a product out of range then adds 0 instead of stopping the kernel, so
    // that the skip ladder times the persistent path, not the graph path it would fall back to.)
    else if (!PK_SKIPS(a, PK_SKIP_ROWS | PK_SKIP_ATTN | PK_SKIP_PREP | PK_SKIP_FETCH | PK_SKIP_DOT))
        atomicCAS(a.err, 0u, PK_ERR_FX | (u32)(step + 1));
    return f;
}

// Adds n products whose fixed-point sum is f into word w.
__device__ __forceinline__ void pk_acc_red(u64* w, u32 n, long long f) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(w), "l"((u64)n * PK_ACC_ONE + (u64)f) : "memory");
}

__device__ __forceinline__ void pk_acc_add(const PkArgs& a, int step, u64* w, float v) {
    pk_acc_red(w, 1, pk_acc_fx(a, step, v));
}

// The adds counted in word w, and its fixed-point sum.
__device__ __forceinline__ u32 pk_acc_count(u64 w) { return (u32)((w + PK_ACC_HALF) >> 56); }
__device__ __forceinline__ long long pk_acc_sum(u64 w) {
    return (long long)((w + PK_ACC_HALF) & (PK_ACC_ONE - 1)) - (long long)PK_ACC_HALF;
}

__device__ __forceinline__ ulonglong2 ld_acc2(const u64* p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}

// xs[i] = the accumulator's value + raw[i] for i < n (n even, acc 16-byte aligned), each pair of
// words polled until both count `count` adds; then a barrier. False when the kernel must stop.
__device__ bool pk_load_acc(const PkArgs& a, const u64* acc, float* xs, const float* raw, int n, u32 count, int step) {
    const u32 nap = pk_nap(a);
    const int np = PK_POLLER(threadIdx.x) ? n >> 1 : 0;
    int ok = 1;
    for (int rb = 0; rb < np && ok; rb += 4 * PK_POLLERS) {
        u32 pend = 0;
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (ll_index(rb, u) < np) pend |= 1u << u;
        u64 t0 = 0;
        for (int it = 0; pend; it++) {
            ulonglong2 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if ((pend >> u) & 1) v[u] = ld_acc2(acc + 2 * ll_index(rb, u));
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int j = ll_index(rb, u);
                if (((pend >> u) & 1) && pk_acc_count(v[u].x) == count && pk_acc_count(v[u].y) == count) {
                    // The graph path's fixed-point rows (matvec.cu mv_store_fx), the same bits.
                    xs[2 * j] = fx_value(pk_acc_sum(v[u].x)) + raw[2 * j];
                    xs[2 * j + 1] = fx_value(pk_acc_sum(v[u].y)) + raw[2 * j + 1];
                    pend &= ~(1u << u);
                }
            }
            if (pend && !pk_poll_on(a, it, t0, nap, step)) {
                ok = 0;
                break;
            }
        }
    }
    return __syncthreads_and(ok) != 0;
}

// Pairs a poller takes a round in the attention step's poll (its q, k and v: 96 pairs on SmolLM2
// and Qwen, one round for 128 pollers). A matvec step's poll takes pk_load_ll's default 8 (2048
// values); 6 and 4, which cover SmolLM2's and Qwen's widest tagged inputs in one round, measured
// no faster (MOLLA_KDEFS=POLLU, sessions 42-43).
// A fused q/k/v build's (PK_FUSEQKV) also polls the residual row, up to 512 pairs in one round.
#ifdef PK_FUSEQKV
#define PK_ATT_POLL_U 4
#else
#define PK_ATT_POLL_U 2
#endif
