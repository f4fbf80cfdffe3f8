// Experiment KTRACE (MOLLA_KDEFS=KTRACE; testing::ktrace_*, tests/bench.rs graph_trace): each
// decode kernel's launch timed on the device, so that a graph replay can be seen from inside
// (events between launches only time plain launches, gaps included). Block 0 takes the launch's
// slot as it starts and stamps the start, the kernel's kind and the launch's grid id (%gridid,
// the same in every block of a launch); block 0 stamps again as it passes pdl_wait (its work's
// start: under MOLLA_PDL a block may start before the kernel before it has ended), and every
// block's thread 0 raises the slot's end to its own as it returns. Launches may overlap (PDL):
// a block finds its launch's slot by the grid id among the last slots taken.
#ifdef MOLLA_X_KTRACE
#define KTRACE_SLOTS 4096
#define KTRACE_BACK 32
__device__ unsigned long long ktrace_t0[KTRACE_SLOTS], ktrace_tw[KTRACE_SLOTS], ktrace_t1[KTRACE_SLOTS],
    ktrace_grid[KTRACE_SLOTS];
__device__ unsigned int ktrace_kind[KTRACE_SLOTS], ktrace_seq;

__device__ __forceinline__ u64 ktrace_gridid() {
    u64 g;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
    return g;
}

__device__ __forceinline__ bool ktrace_block0() {
    return threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
}

// This launch's slot (among the last KTRACE_BACK taken), or -1 when block 0 has not taken it.
__device__ __forceinline__ int ktrace_slot() {
    const u64 g = ktrace_gridid();
    const unsigned seq = *(volatile unsigned*)&ktrace_seq;
    for (unsigned i = 1; i <= KTRACE_BACK && i <= seq; i++) {
        unsigned s = (seq - i) % KTRACE_SLOTS;
        if (*(volatile unsigned long long*)&ktrace_grid[s] == g) return (int)s;
    }
    return -1;
}

// pdl_wait's stamp (common.cuh declares it): block 0's work starts.
__device__ void ktrace_wait_stamp() {
    if (!ktrace_block0()) return;
    int s = ktrace_slot();
    if (s >= 0) ktrace_tw[s] = global_ns();
}

struct KTrace {
    __device__ explicit KTrace(unsigned kind) {
        if (ktrace_block0()) {
            // The grid id first, then the slot count (a block searching the slots sees the id).
            // Launches take slots one at a time: KTRACE comes before pdl_trigger in every
            // kernel, so the next launch starts only after this block 0 has taken its slot.
            unsigned s = (*(volatile unsigned*)&ktrace_seq) % KTRACE_SLOTS;
            ktrace_kind[s] = kind;
            ktrace_t0[s] = global_ns();
            ktrace_tw[s] = 0;
            ktrace_t1[s] = 0;
            ktrace_grid[s] = ktrace_gridid();
            __threadfence();
            // The add's old value is used, so the add is done before this block goes on to let
            // the next launch start: a bare reduction may still be on its way when that launch's
            // block 0 reads the count, and both take one slot (session 49's trace: an empty slot
            // every few steps, a step's launches out of order). A slot taken twice all the same
            // is marked empty (kind 0), which graph_trace leaves out.
            const unsigned prev = atomicAdd(&ktrace_seq, 1u);
            if (prev % KTRACE_SLOTS != s) ktrace_kind[s] = 0;
        }
        // The rest of block 0 waits for its thread 0 to have taken the slot: any of its threads'
        // pdl_trigger may count as the block's, and the next launch's block 0 would then read
        // the count before this one's add (a guess at session 49's slots taken twice, not yet
        // run).
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) __syncthreads();
    }
    // Every return of the kernel passes here.
    __device__ ~KTrace() {
        if (threadIdx.x != 0) return;
        int s = ktrace_slot();
        if (s >= 0) atomicMax(&ktrace_t1[s], global_ns());
    }
};
#define KTRACE(kind) KTrace ktrace_guard_(kind)
#else
#define KTRACE(kind)
#endif
