// Shared definitions for every molla kernel. NVRTC compiles the kernel files as one program with
// this prelude first; no system headers are needed (f16 conversions use PTX directly).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// A kernel of the main program. The persistent decode kernel is compiled as a program of its own,
// built for one model's weight types (crates/cuda/src/compile.rs): that program defines
// MOLLA_PK_ONLY and reads the same files for their device functions, and there every other
// kernel is an uninstantiated template, so that it costs no compile time and no code.
#ifdef MOLLA_PK_ONLY
#define MOLLA_KERNEL template <int = 0> __global__
#else
#define MOLLA_KERNEL extern "C" __global__
#endif

// ggml type ids (ggml.h).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30

// Bytes of a Q6_K block in device memory: 224, the file's 210 and zero padding (weights.rs pads
// every block on upload, so that its fields sit at 16-, 8- and 2-byte aligned offsets and are read
// with vector loads), or the file's 210 with MOLLA_X_Q6FILE (for comparison: MOLLA_KDEFS=Q6FILE).
#ifdef MOLLA_X_Q6FILE
#define Q6K_BYTES 210
#else
#define Q6K_BYTES 224
#endif

// MOLLA_LEGPAD (compile.rs `PkBuild::legpad`, for models whose layers have such matrices): Q8_0,
// Q4_0 and Q5_0 blocks padded on upload (weights.rs `pad_legacy`) to 36, 20 and 24 bytes: the
// scale as an f32 in the first word (the file's f16, converted exactly), Q5_0's qh in the second,
// then the quants, so that every field is read with aligned 4-byte loads instead of 2-byte ones
// and joins (`legacy_padded`).
#ifdef MOLLA_LEGPAD
#define LEGPAD true
#else
#define LEGPAD false
#endif

// Whether the device holds format T's blocks padded (LEGPAD): d as an f32 in the block's first
// word, then (Q5_0) qh, then the quants, every word 4-byte aligned.
template <int T>
__host__ __device__ constexpr bool legacy_padded() {
    return LEGPAD && (T == T_Q8_0 || T == T_Q4_0 || T == T_Q5_0);
}

// Bytes of a legacy format's block of 32 weights (Q8_0, Q4_0, Q4_1, Q5_0; else Q5_1), as the
// device holds it (LEGPAD: padded).
template <int T>
__host__ __device__ constexpr int legacy_bytes() {
    if (legacy_padded<T>()) return T == T_Q8_0 ? 36 : T == T_Q4_0 ? 20 : 24;
    return T == T_Q8_0 ? 34 : T == T_Q4_0 ? 18 : T == T_Q4_1 ? 20 : T == T_Q5_0 ? 22 : 24;
}

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float(((u32)b) << 16); }

// Loads from GGUF blocks, whose alignment is only what the block size allows.
__device__ __forceinline__ u16 ld16(const u8* p) { return *(const u16*)p; }
__device__ __forceinline__ u32 ld32a2(const u8* p) { return (u32)ld16(p) | ((u32)ld16(p + 2) << 16); }
__device__ __forceinline__ u32 ld32(const u8* p) { return *(const u32*)p; }

// Sum over groups of `lanes` consecutive lanes (a power of two <= 32); every lane gets its group's sum.
// All 32 lanes of the warp must call it.
__device__ __forceinline__ float group_sum(float v, int lanes) {
    for (int off = lanes >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_sum(float v) { return group_sum(v, 32); }

// The device's global timer, ns.
__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Programmatic dependent launch (sm_90, compiled in with MOLLA_PDL; crate::pdl): pdl_trigger lets
// the next kernel's blocks be scheduled as this grid's finish; pdl_wait returns once the kernel
// before this one has completed and its writes are visible. A kernel launched as a dependent
// calls pdl_wait before it touches any buffer another kernel reads or writes (only weights may
// be read before). Without MOLLA_PDL both are empty.
__device__ __forceinline__ void pdl_trigger() {
#if defined(MOLLA_PDL) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#ifdef MOLLA_X_KTRACE
__device__ void ktrace_wait_stamp();  // ktrace.cuh
#endif

__device__ __forceinline__ void pdl_wait() {
#if defined(MOLLA_PDL) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef MOLLA_X_KTRACE
    ktrace_wait_stamp();
#endif
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
