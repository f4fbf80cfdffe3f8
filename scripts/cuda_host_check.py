#!/usr/bin/env python3
"""Host checks of CUDA kernel logic, no GPU needed: the unit decoders (crates/cuda/kernels/q16.cuh)
and the persistent kernel's warp-private row split (persistent.cu).

The batched matvec decodes a weight unit once for several inputs (unit_load / unit_apply); the
single-row decoders (unit_q16: unit_legacy, unit_k45, unit_q6k) are kept whole because splitting
them changes the persistent kernel's register allocation. Both must give the same bits. This
compiles q16.cuh for the host with a C++ compiler (PTX-only helpers replaced by exact C
equivalents, no FMA contraction, as the kernels' _rn operations) and compares the two on random
units of every format. It also runs the warp-private weight pipelines' row bookkeeping
(decode_persistent_warps) over random steps and grids: every row of every segment taken exactly
once, every chunk's 16-byte spans within the warp's half buffer. Skipped (exit 0, with a
message) when no C++ compiler is found.

    python3 scripts/cuda_host_check.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "crates/cuda/kernels"


def drop_fn(src, name):
    """src without the function whose signature contains `name` (its whole braced body)."""
    i = src.rfind("\n", 0, src.index(name)) + 1
    depth = 0
    for k in range(src.index("{", i), len(src)):
        depth += {"{": 1, "}": -1}.get(src[k], 0)
        if depth == 0:
            return src[:i] + src[k + 1:]
    raise ValueError(name)


# The PTX-only helpers (inline asm) are replaced by exact C versions below.
common = (KERNELS / "common.cuh").read_text()
q16 = (KERNELS / "q16.cuh").read_text()
for n in ["float h2f(u16 h)", "u16 f2h(float f)"]:
    common = drop_fn(common, n)
for n in ["int dp2a_lo(int a, u32 b, int c)", "int dp2a_hi(int a, u32 b, int c)"]:
    q16 = drop_fn(q16, n)
shim=r'''
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__
struct int4 { int x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct Dim { int x; };
static Dim threadIdx{0}, blockDim{256};
static float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static int __float2int_rn(float x) { return (int)nearbyintf(x); }
static float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
template <class T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
static void __syncthreads() {}
'''
post_common=r'''
static float h2f(u16 h) {
    u32 s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023, f;
    if (e == 0) { if (m == 0) f = s << 31; else { e = 127 - 15 + 1; while (!(m & 1024)) { m <<= 1; e--; } m &= 1023; f = (s << 31) | (e << 23) | (m << 13); } }
    else if (e == 31) f = (s << 31) | (255u << 23) | (m << 13);
    else f = (s << 31) | ((e - 15 + 127) << 23) | (m << 13);
    float r; memcpy(&r, &f, 4); return r;
}
static int dp2a_lo(int a, u32 b, int c) { return c + (short)(a & 0xffff) * (i8)(b & 0xff) + (short)(a >> 16) * (i8)((b >> 8) & 0xff); }
static int dp2a_hi(int a, u32 b, int c) { return c + (short)(a & 0xffff) * (i8)((b >> 16) & 0xff) + (short)(a >> 16) * (i8)((b >> 24) & 0xff); }
'''
test=r'''
template <int T> int check(const char* name) {
    std::mt19937 rng(1);
    const int cols = 4096;
    static u8 w[8192] __attribute__((aligned(16)));
    for (int i = 0; i < 8192; i++) w[i] = rng() & 0xff;
    static int4 q[cols / 8]; static float dx[cols / 32], sx[cols / 32]; static int s16[cols / 16];
    for (auto& v : q) v = {(int)rng(), (int)rng(), (int)rng(), (int)rng()};
    for (auto& v : dx) v = (float)(rng() % 1000) * 1e-4f + 1e-5f;
    for (auto& v : sx) v = (float)((int)(rng() % 2001) - 1000) * 1e-3f;
    for (auto& v : s16) v = (int)(rng() % 200001) - 100000;
    Xq x; x.q = q; x.dx = dx; x.sx = sx; x.s16 = s16;
    int nu = q16_units<T>(cols), bad = 0;
    for (int u = 0; u < nu; u++) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        float a = unit_q16<T>(w, xr, x, u);
        UnitW uw;
        unit_load<T>(w, u, uw);
        float b = unit_apply<T>(uw, xr, x, u);
        if (memcmp(&a, &b, 4) != 0) { bad++; if (bad < 3) printf("%s unit %d: %g vs %g\n", name, u, a, b); }
    }
    printf("%s: %d units, %d differ\n", name, nu, bad);
    return bad;
}
int main() {
    int bad = 0;
    bad += check<T_Q4_0>("Q4_0"); bad += check<T_Q4_1>("Q4_1"); bad += check<T_Q5_0>("Q5_0");
    bad += check<T_Q5_1>("Q5_1"); bad += check<T_Q8_0>("Q8_0"); bad += check<T_Q4_K>("Q4_K");
    bad += check<T_Q5_K>("Q5_K"); bad += check<T_Q6_K>("Q6_K");
    return bad != 0;
}
'''


def extract(src, start):
    """The definition in src that begins with `start` (a struct or function), braces and all."""
    i = src.index(start)
    depth = 0
    for k in range(src.index("{", i), len(src)):
        depth += {"{": 1, "}": -1}.get(src[k], 0)
        if depth == 0:
            return src[i:k + 1] + (";" if start.startswith("struct") else "") + "\n"
    raise ValueError(start)


# Warp-private weight pipelines (persistent.cu, decode_persistent_warps): over random steps and
# grids, every block's warps take every row of every segment exactly once, in chunks whose
# 16-byte spans fit the warp's half buffer.
pk = (KERNELS / "persistent_steps.cuh").read_text() + (KERNELS / "persistent.cu").read_text()
pk_parts = "".join(extract(pk, name) for name in [
    "struct PkStep", "struct PkArgs", "__device__ __forceinline__ void pk_rows(",
    "struct PkChunk", "__device__ __forceinline__ PkChunk pk_next_chunk(",
    "__device__ __forceinline__ const u8* pk_span(", "template <bool W>\n__device__ __forceinline__ int pk_warp_bytes(",
    "__device__ __forceinline__ void pk_warp_rows(",
])
warp_test = r'''
#include <vector>
#include <algorithm>
using std::min; using std::max;
#define PK_WARPS 8
#define PK_OP_MATVEC 0
static Dim blockIdx{0}, gridDim{1};
''' + pk_parts.replace("__device__", "") + r'''
int main() {
    std::mt19937 rng(5);
    int bad = 0, tried = 0;
    for (int it = 0; it < 3000; it++) {
        PkStep st;
        memset(&st, 0, sizeof st);
        st.op = PK_OP_MATVEC;
        st.pair = rng() % 3 == 0;
        st.nseg = st.pair ? 2 : 1 + rng() % 3;
        int total = 0;
        for (int s = 0; s < st.nseg; s++) {
            st.rows[s] = st.pair && s == 1 ? st.rows[0] : 1 + rng() % (rng() % 2 ? 200 : 20000);
            st.row_bytes[s] = 18 + rng() % 12000;
            st.w[s] = (const u8*)(size_t)(0x10000000ull * (s + 1));
            total = st.pair ? st.rows[0] : total + st.rows[s];
        }
        st.total = total;
        PkArgs a;
        memset(&a, 0, sizeof a);
        a.stages = 1 + rng() % 2;
        a.chunk = (1024 + rng() % 220000) & ~15;
        int wbytes = pk_warp_bytes<true>(st, a);
        if (!wbytes) continue;
        tried++;
        int half = (a.stages * (a.chunk + 64)) / PK_WARPS / 2 & ~15;
        std::vector<std::vector<int>> seen(st.nseg);
        for (int s = 0; s < st.nseg; s++) seen[s].assign(st.rows[s], 0);
        gridDim.x = 1 + rng() % 140;
        for (int b = 0; b < gridDim.x; b++) {
            blockIdx.x = b;
            int r0, r1;
            pk_rows(st.total, r0, r1);
            for (int w = 0; w < PK_WARPS; w++) {
                int wa, wb;
                pk_warp_rows(r0, r1, w, wa, wb);
                for (int cur = wa; cur < wb;) {
                    PkChunk c = pk_next_chunk(st, cur, wb, wbytes, false);
                    int bytes = 0;
                    for (int j = 0; j < (st.pair ? 2 : 1); j++) {
                        int n16;
                        pk_span(st, st.pair ? j : c.seg, c.ra, c.rb, n16);
                        bytes += 16 * n16;
                    }
                    if (bytes > half || c.rb <= c.ra) bad++;
                    for (int r = c.ra; r < c.rb; r++) {
                        seen[c.seg][r]++;
                        if (st.pair) seen[1][r]++;
                    }
                }
            }
        }
        for (int s = 0; s < st.nseg; s++)
            for (int v : seen[s])
                if (v != 1) { bad++; break; }
    }
    printf("warp pipelines: %d steps, %d problems\n", tried, bad);
    return bad != 0 || tried < 100;
}
'''

cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
if not cxx:
    print("cuda_host_check: no C++ compiler found, skipped")
    sys.exit(0)
rc = 0
with tempfile.TemporaryDirectory() as d:
    for name, text in [("units", shim + common + post_common + q16 + test),
                       ("warps", shim + common + post_common + warp_test)]:
        cpp, exe = Path(d) / f"{name}.cpp", Path(d) / name
        cpp.write_text(text)
        subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-w", "-o", str(exe), str(cpp)], check=True)
        rc |= subprocess.run([str(exe)]).returncode
print("cuda_host_check:", "PASS" if rc == 0 else "FAIL")
sys.exit(rc)
