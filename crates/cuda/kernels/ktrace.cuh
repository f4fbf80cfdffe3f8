// Experiment KTRACE (MOLLA_KDEFS=KTRACE; testing::ktrace_*, tests/bench.rs graph_trace): each
// decode kernel's launch timed on the device, so that a graph replay can be seen from inside
// (events between launches only time plain launches, gaps included). Block 0 takes the launch's
// slot as it starts and stamps the start and the kernel's kind; every block's thread 0 counts
// its block out as it returns, and the last one stamps the end (%globaltimer, ns) and resets the
// count. Launches must not overlap (no PDL). Off, KTRACE(k) is nothing.
#ifdef MOLLA_X_KTRACE
#define KTRACE_SLOTS 4096
__device__ unsigned long long ktrace_t0[KTRACE_SLOTS], ktrace_t1[KTRACE_SLOTS];
__device__ unsigned int ktrace_kind[KTRACE_SLOTS], ktrace_seq, ktrace_done;

struct KTrace {
    __device__ explicit KTrace(unsigned kind) {
        if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
            unsigned s = atomicAdd(&ktrace_seq, 1u) % KTRACE_SLOTS;
            ktrace_kind[s] = kind;
            ktrace_t0[s] = global_ns();
        }
    }
    // Every return of the kernel passes here.
    __device__ ~KTrace() {
        if (threadIdx.x != 0) return;
        __threadfence();
        const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(&ktrace_done, 1u) == blocks - 1) {
            // Block 0 has started (and ended) by now: its slot is the last one taken.
            unsigned s = (*(volatile unsigned*)&ktrace_seq - 1u) % KTRACE_SLOTS;
            ktrace_t1[s] = global_ns();
            ktrace_done = 0;
            __threadfence();
        }
    }
};
#define KTRACE(kind) KTrace ktrace_guard_(kind)
#else
#define KTRACE(kind)
#endif
