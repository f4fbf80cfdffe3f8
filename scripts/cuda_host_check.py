#!/usr/bin/env python3
"""Host checks of CUDA kernel logic, no GPU needed: the unit decoders (crates/cuda/kernels/q16.cuh).

The batched matvec decodes a weight unit once for several inputs (unit_load / unit_apply); the
single-row decoders (unit_q16: unit_legacy, unit_k45, unit_q6k) are kept whole because splitting
them changes the persistent kernel's register allocation. Both must give the same bits, as must
the wide matvec's decoders (unit_q16<T, true>: aligned word loads for the 2-byte aligned formats)
and unit_q16<T>, and its lean Q4_K row walk (q16_lean.cuh, matvec_wide's Q4_K rows) and
row_dot_q16_one, and the persistent kernel's half-warp pair walk (rows_dot_q16_half, then a
16-lane butterfly) and rows_dot_q16 on a whole warp (then warp_sum's). This
compiles q16.cuh for the host with a C++ compiler (PTX-only helpers replaced by exact C
equivalents, no FMA contraction, as the kernels' _rn operations) and compares the two on random
units of every format. Skipped (exit 0, with a message) when no C++ compiler is found.

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
    """src without the function whose signature contains `name` (its whole braced body, and the
    template line before it)."""
    i = src.rfind("\n", 0, src.index(name)) + 1
    j = src.rfind("\n", 0, i - 1) + 1
    if src[j:i].startswith("template"):
        i = j
    depth = 0
    for k in range(src.index("{", i), len(src)):
        depth += {"{": 1, "}": -1}.get(src[k], 0)
        if depth == 0:
            return src[:i] + src[k + 1:]
    raise ValueError(name)


# The PTX-only helpers (inline asm) are replaced by exact C versions below.
common = (KERNELS / "common.cuh").read_text()
q16 = (KERNELS / "q16.cuh").read_text()
rows = (KERNELS / "q16_rows.cuh").read_text()
lean = (KERNELS / "q16_lean.cuh").read_text()
dequant = (KERNELS / "dequant.cuh").read_text()
for n in ["float h2f(u16 h)", "u16 f2h(float f)"]:
    common = drop_fn(common, n)
for n in ["int dp2a_lo(int a, u32 b, int c)", "int dp2a_hi(int a, u32 b, int c)", "int f2i16_rn(float x)"]:
    q16 = drop_fn(q16, n)
lean = drop_fn(lean, "int4 lds16(u32 a)")
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
struct uint2 { unsigned x, y; };
static uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
static float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static float2 make_float2(float x, float y) { return {x, y}; }
struct Dim { int x; };
static Dim threadIdx{0}, blockDim{256};
// As the device: a NaN result is the canonical 0x7fffffff; a conversion of NaN gives 0 and
// saturates out of range.
static float canon(float r) { unsigned u = 0x7fffffffu; if (r != r) memcpy(&r, &u, 4); return r; }
static float __fmul_rn(float a, float b) { volatile float r = a * b; return canon(r); }
static float __fadd_rn(float a, float b) { volatile float r = a + b; return canon(r); }
static float __fsub_rn(float a, float b) { volatile float r = a - b; return canon(r); }
static float __fmaf_rn(float a, float b, float c) { volatile float r = fmaf(a, b, c); return canon(r); }
static int __float2int_rn(float x) { return x != x ? 0 : x >= 2147483648.f ? 2147483647 : x < -2147483648.f ? (-2147483647 - 1) : (int)nearbyintf(x); }
static long long __double2ll_rn(double x) { return llrint(x); }
static float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
template <class T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <class T> T __ldg(const T* p) { return *p; }
static unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (sh & 31));
}
static void __syncthreads() {}
static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= ((((a >> (8 * i)) & 0xff) - ((b >> (8 * i)) & 0xff)) & 0xff) << (8 * i);
    return r;
}
static unsigned __byte_perm(unsigned x, unsigned y, unsigned sel) {
    unsigned long long b = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((b >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
'''
post_common=r'''
static float h2f(u16 h) {
    u32 s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023, f;
    if (e == 0) { if (m == 0) f = s << 31; else { e = 127 - 15 + 1; while (!(m & 1024)) { m <<= 1; e--; } m &= 1023; f = (s << 31) | (e << 23) | (m << 13); } }
    else if (e == 31) f = (s << 31) | (255u << 23) | (m << 13);
    else f = (s << 31) | ((e - 15 + 127) << 23) | (m << 13);
    float r; memcpy(&r, &f, 4); return r;
}
// Byte k of b, signed or (U) unsigned.
template <bool U> static int byte_of(u32 b, int k) { u32 v = (b >> (8 * k)) & 0xff; return U ? (int)v : (int)(i8)v; }
template <bool U = false> static int dp2a_lo(int a, u32 b, int c) { return c + (short)(a & 0xffff) * byte_of<U>(b, 0) + (short)(a >> 16) * byte_of<U>(b, 1); }
template <bool U = false> static int dp2a_hi(int a, u32 b, int c) { return c + (short)(a & 0xffff) * byte_of<U>(b, 2) + (short)(a >> 16) * byte_of<U>(b, 3); }
// PTX's cvt.rni.s16.f32: nearest, ties to even, saturated to i16; NaN gives 0.
static int f2i16_rn(float x) { return x != x ? 0 : x >= 32767.f ? 32767 : x <= -32768.f ? -32768 : (int)nearbyintf(x); }
// Shared memory as the lean walk addresses it: offsets into one 128-byte aligned buffer.
alignas(128) static u8 host_smem[65536];
static u32 smem_u32(const void* p) { return (u32)((const u8*)p - host_smem); }
static int4 lds16(u32 a) { int4 v; memcpy(&v, host_smem + a, 16); return v; }
'''
# A random quantized input row of `cols` values, at most 16384 (its buffers static: one row at a
# time).
xq_rand=r'''
static Xq random_xq(std::mt19937& rng, int cols = 4096) {
    const int most = 16384;
    static int4 q[most / 8]; static float dx[most / 32], sx[most / 32]; static int s16[most / 16];
    for (int i = 0; i < cols / 8; i++) q[i] = {(int)rng(), (int)rng(), (int)rng(), (int)rng()};
    for (int i = 0; i < cols / 32; i++) dx[i] = (float)(rng() % 1000) * 1e-4f + 1e-5f;
    for (int i = 0; i < cols / 32; i++) sx[i] = (float)((int)(rng() % 2001) - 1000) * 1e-3f;
    // Each run of 16's s16 the sum of its quants, as q16_block leaves it.
    for (int i = 0; i < cols / 16; i++) {
        s16[i] = 0;
        for (int h = 0; h < 2; h++) {
            const int4 v = q[xq_slot(2 * i + h)];
            for (int e : {v.x, v.y, v.z, v.w}) s16[i] += (short)(e & 0xffff) + (short)(e >> 16);
        }
    }
    Xq x; x.q = q; x.dx = dx; x.sx = sx; x.s16 = s16;
    return x;
}
'''
test=r'''
template <int T> int check(const char* name) {
    std::mt19937 rng(1);
    const int cols = 4096;
    static u8 w[8192] __attribute__((aligned(16)));
    for (int i = 0; i < 8192; i++) w[i] = rng() & 0xff;
    Xq x = random_xq(rng);
    int nu = q16_units<T>(cols), bad = 0;
    for (int u = 0; u < nu; u++) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        float a = unit_q16<T>(w, xr, x, u);
        UnitW uw;
        unit_load<T>(w, u, uw);
        float b = unit_apply<T>(uw, xr, x, u);
        if (memcmp(&a, &b, 4) != 0) { bad++; if (bad < 3) printf("%s unit %d: %g vs %g\n", name, u, a, b); }
        // matvec_wide's decoders (G: aligned word loads for the 2-byte aligned formats) on the
        // same unit, at both alignments of a row's start.
        for (int off = 0; off < 4; off += 2) {
            float c = unit_q16<T, true>(w + off, xr, x, u), e = unit_q16<T, false>(w + off, xr, x, u);
            if (memcmp(&c, &e, 4) != 0) { bad++; if (bad < 3) printf("%s word loads unit %d: %g vs %g\n", name, u, c, e); }
        }
    }
    printf("%s: %d units, %d differ\n", name, nu, bad);
    return bad;
}
// q16_lean.cuh's Q4_K walk against row_dot_q16_one, lane by lane, on rows of one to seven units
// a lane (two at a time past 64 units) and narrower than the warp, its input in (host) shared memory as matvec_wide has it.
int check_lean() {
    std::mt19937 rng(3);
    int bad = 0;
    for (int cols : {256, 768, 4096, 4352, 6144, 14336}) {
        const int rb = cols / 256 * 144;
        static u8 w[2 * 14336 / 256 * 144 + 16] __attribute__((aligned(16)));
        for (int r = 0; r < 2 * rb; r++) w[r] = rng() & 0xff;
        Xq src = random_xq(rng, cols);
        memcpy(host_smem, src.q, 2 * cols);
        memcpy(host_smem + xq_qbytes(cols), src.dx, cols / 32 * 4);
        memcpy(host_smem + xq_qbytes(cols) + cols / 8, src.sx, cols / 32 * 4);
        Xq x = xq_at(host_smem, cols);
        for (int lane = 0; lane < 32; lane++) {
            bool ok;
            u32 xa = lean_xa(x, lane, ok);
            if (!ok) { bad++; printf("lean: row not aligned\n"); }
            for (int r = 0; r < 2; r++) {
                float a = row_dot_k4_lean(w + r * rb, x, cols, lane, xa);
                float b = row_dot_q16_one<T_Q4_K>(w + r * rb, x, cols, lane);
                // Two NaNs count as the same: the device's are canonical, and the host compiler
                // may swap an add's operands, which picks the other NaN's sign.
                if (memcmp(&a, &b, 4) != 0 && !(std::isnan(a) && std::isnan(b))) { bad++; if (bad < 3) printf("lean cols %d lane %d row %d: %g vs %g\n", cols, lane, r, a, b); }
            }
        }
    }
    printf("Q4_K lean rows: %d differ\n", bad);
    return bad;
}
// rows_dot_q16_half (the persistent kernel's PK_PAIR_HALF gate/up pairs) then group_sum over 16
// lanes against rows_dot_q16 on 32 lanes then warp_sum, both butterflies simulated as the
// shuffles run (v[l] + v[l ^ off], every lane at once): lane 0's sums, bit for bit, on rows of
// fewer units than the half-warp's lanes up to several units a lane.
static float butterfly(float* v, int lanes) {
    for (int off = lanes >> 1; off > 0; off >>= 1) {
        float n[32];
        for (int l = 0; l < lanes; l++) n[l] = v[l] + v[l ^ off];
        memcpy(v, n, lanes * sizeof(float));
    }
    return v[0];
}
template <int T> int check_half(const char* name, std::initializer_list<int> widths) {
    std::mt19937 rng(5);
    int bad = 0, rows = 0;
    for (int cols : widths) {
        const int rb = q16_units<T>(cols) * (T == T_Q4_K ? 144 / 8 : legacy_bytes<T>());
        static u8 w[2 * 5120 * 2] __attribute__((aligned(16)));
        for (int i = 0; i < 2 * rb; i++) w[i] = rng() & 0xff;
        Xq x = random_xq(rng, cols);
        const u8* wr[2] = {w, w + rb};
        float full[2][32], half[2][32];
        for (int lane = 0; lane < 32; lane++) {
            float acc[2];
            rows_dot_q16<T, 2>(wr, 2, x, cols, lane, 32, acc);
            full[0][lane] = acc[0], full[1][lane] = acc[1];
        }
        for (int h = 0; h < 16; h++) {
            float acc[2];
            rows_dot_q16_half<T, 2>(wr, 2, x, cols, h, acc);
            half[0][h] = acc[0], half[1][h] = acc[1];
        }
        for (int r = 0; r < 2; r++, rows++) {
            float a = butterfly(full[r], 32), b = butterfly(half[r], 16);
            if (memcmp(&a, &b, 4) != 0 && !(std::isnan(a) && std::isnan(b))) { bad++; if (bad < 3) printf("%s half cols %d row %d: %g vs %g\n", name, cols, r, a, b); }
        }
    }
    printf("%s pairs a half-warp: %d rows, %d differ\n", name, rows, bad);
    return bad;
}
int main() {
    int bad = 0;
    bad += check_lean();
    bad += check_half<T_Q8_0>("Q8_0", {256, 576, 896, 1536, 4864});
    bad += check_half<T_Q4_1>("Q4_1", {576, 1024, 1536});
    bad += check_half<T_Q5_0>("Q5_0", {896, 4864});
    bad += check_half<T_Q4_K>("Q4_K", {256, 1024, 4096});
    bad += check<T_Q4_0>("Q4_0"); bad += check<T_Q4_1>("Q4_1"); bad += check<T_Q5_0>("Q5_0");
    bad += check<T_Q5_1>("Q5_1"); bad += check<T_Q8_0>("Q8_0"); bad += check<T_Q4_K>("Q4_K");
    bad += check<T_Q5_K>("Q5_K"); bad += check<T_Q6_K>("Q6_K");
    return bad != 0;
}
'''


# Q6_K blocks padded to 224 bytes (kernels/common.cuh Q6K_BYTES, as weights.rs pads them): the same
# random Q6_K row decoded from them and, built with MOLLA_X_Q6FILE (MOLLA_KDEFS=Q6FILE), from the
# file's 210-byte blocks must give the same bits by every decoder.
q6dump=r'''
int main() {
    std::mt19937 rng(7);
    const int cols = 4096, nb = cols / 256;
    static u8 raw[nb * 210], w[nb * 224 + 16] __attribute__((aligned(16)));
    for (auto& v : raw) v = rng() & 0xff;
    for (int b = 0; b < nb; b++) memcpy(w + b * Q6K_BYTES, raw + b * 210, 210);
    Xq x = random_xq(rng);
    for (int u = 0; u < q16_units<T_Q6_K>(cols); u++) {
        int4 xr[8];
        load_xu<T_Q6_K>(x, u, xr);
        float a = unit_q16<T_Q6_K>(w, xr, x, u), c = unit_q16<T_Q6_K, true>(w, xr, x, u);
        UnitW uw;
        unit_load<T_Q6_K>(w, u, uw);
        float b = unit_apply<T_Q6_K>(uw, xr, x, u);
        u32 ia, ib, ic;
        memcpy(&ia, &a, 4); memcpy(&ib, &b, 4); memcpy(&ic, &c, 4);
        printf("%d %08x %08x %08x\n", u, ia, ib, ic);
    }
}
'''

# The legacy formats LEGPAD pads (Q8_0, Q4_0, Q5_0): the same random blocks in the
# file's layout, or padded as weights.rs `pad_legacy` pads them (the f16 scale as an f32, then the
# rest, Q5_0's qh permuted), through every decoder of them (unit_q16 from shared and global memory, unit_load +
# unit_apply, the fixed-point rows' unit_f32, dq8's eight values a chunk). Built with and without
# LEGPAD, the two dumps must be the same lines, and each line's decoders agree.
legdump=r'''
template <int T> void dump_legacy(std::mt19937& rng) {
    const int cols = 4096, nb = cols / 32, file = T == T_Q8_0 ? 34 : T == T_Q4_0 ? 18 : 22;
    const int size = legacy_bytes<T>();
    static u8 raw[128 * 34], w[128 * 36 + 16] __attribute__((aligned(16)));
    for (int i = 0; i < nb * file; i++) raw[i] = rng() & 0xff;
    // Scales of ordinary size (random f16 bits would make infinities and NaNs of most).
    for (int b = 0; b < nb; b++) { u16 d = (u16)(0x2000 + rng() % 0x2000) | (rng() & 1 ? 0x8000 : 0); memcpy(raw + b * file, &d, 2); }
    for (int b = 0; b < nb; b++) {
        if (legacy_padded<T>()) {
            float d = h2f((u16)(raw[b * file] | raw[b * file + 1] << 8));
            memcpy(w + b * size, &d, 4);
            memcpy(w + b * size + 4, raw + b * file + 2, file - 2);
            if (T == T_Q5_0) {
                // qh permuted: quant q's bit at 8 (q % 4) + q / 4.
                u32 qh, p = 0;
                memcpy(&qh, raw + b * file + 2, 4);
                for (int q = 0; q < 32; q++) p |= ((qh >> q) & 1u) << (8 * (q % 4) + q / 4);
                memcpy(w + b * size + 4, &p, 4);
            }
        } else {
            memcpy(w + b * size, raw + b * file, file);
        }
    }
    Xq x = random_xq(rng);
    static float xf[4096] __attribute__((aligned(16)));
    for (int i = 0; i < cols; i++) xf[i] = (float)((int)(rng() % 2001) - 1000) * 1e-3f;
    for (int u = 0; u < nb; u++) {
        int4 xr[8];
        load_xu<T>(x, u, xr);
        float v[4];
        v[0] = unit_q16<T>(w, xr, x, u);
        v[1] = unit_q16<T, true>(w, xr, x, u);
        UnitW uw;
        unit_load<T>(w, u, uw);
        v[2] = unit_apply<T>(uw, xr, x, u);
        unit_load_legacy<T, true>(w + (size_t)u * size, uw);
        v[3] = unit_f32<T>(uw, xf + 32 * u);
        u32 h[4];
        memcpy(h, v, 16);
        printf("%d %d %08x %08x %08x | %08x |", T, u, h[0], h[1], h[2], h[3]);
        for (int c = 0; c < 4; c++) {
            float o[8];
            dq8<T>(w, 4 * u + c, o);
            for (float f : o) { u32 b; memcpy(&b, &f, 4); printf(" %08x", b); }
        }
        printf("\n");
    }
}
int main() {
    std::mt19937 rng(5);
    dump_legacy<T_Q8_0>(rng);
    dump_legacy<T_Q4_0>(rng);
    dump_legacy<T_Q5_0>(rng);
}
'''

# q16_block (the input row's quantization) against a plain reference of its power-of-two scale
# (session 46): d = 2^(E - 14) for the largest magnitude in [2^E, 2^(E+1)), found here with frexp,
# quants v / d rounded to nearest even and clamped to i16, d = 0 and zero quants under 1e-30, d
# infinite and zero quants for an infinite maximum, d NaN when a value is NaN. Under the host's
# shuffles (a lane gets its own value back) one lane's eight values make the block, and its sums
# count that lane twice at each shuffle: s16 = 2 sum(q), sx = d * 4 sum(q).
qdump=r"""
int main() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    static u8 base[512] __attribute__((aligned(16)));
    long long bad = 0, n = 0, top = 0;
    for (int c = 0; c < 400000; c++, n++) {
        float v[8];
        const int kind = c % 8;
        const float scale = std::ldexp(1.f, (int)(rng() % 200) - 100);
        for (int i = 0; i < 8; i++) v[i] = u(rng) * scale;
        // Maxima just under a power of two: quants that round to 2^15 and are clamped.
        if (kind == 1) { float m = std::ldexp(1.f, (int)(rng() % 60) - 30); v[rng() % 8] = (rng() & 1 ? 1.f : -1.f) * std::nextafter(m, 0.f); }
        if (kind == 2) v[rng() % 8] = (rng() & 1) ? INFINITY : -INFINITY;
        if (kind == 3) v[rng() % 8] = NAN;
        if (kind == 4) for (int i = 0; i < 8; i++) v[i] = u(rng) * 1e-31f;
        if (kind == 5) for (int i = 0; i < 8; i++) v[i] = (rng() & 1) ? -0.f : 0.f;
        if (kind == 6) for (int i = 0; i < 8; i++) v[i] = u(rng) * 3.4e38f;
        memset(base, 0, sizeof(base));
        q16_block(v, 0, 0, true, 32, base);
        short q[8];
        memcpy(q, base, 16);
        const float* f = (const float*)(base + xq_qbytes(32));
        const int s16 = *(const int*)(f + 2);
        float m = 0.f;
        bool nan = false;
        for (int i = 0; i < 8; i++) { nan |= v[i] != v[i]; if (!(v[i] != v[i])) m = std::fmax(m, std::fabs(v[i])); }
        float d = 0.f;
        int r[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum = 0;
        if (m >= 1e-30f && std::isfinite(m)) {
            int e;
            std::frexp(m, &e);  // m in [2^(e-1), 2^e)
            d = std::ldexp(1.f, e - 15);
            for (int i = 0; i < 8; i++) {
                double y = std::nearbyint((double)v[i] / d);
                r[i] = v[i] != v[i] ? 0 : (int)std::fmax(-32768.0, std::fmin(32767.0, y));
                top += r[i] == 32767 || r[i] == -32768;
            }
        } else if (m >= 1e-30f) {
            d = INFINITY;
        }
        if (nan) d = NAN;
        for (int i = 0; i < 8; i++) sum += r[i];
        auto same = [](float a, float b) { return a == b || (a != a && b != b); };
        bool ok = s16 == 2 * sum && same(f[0], d) && same(f[1], d * (float)(4 * sum));
        for (int i = 0; i < 8; i++) ok &= q[i] == r[i];
        if (!ok && bad++ < 3) printf("kind %d: m %g d %g vs %g, s16 %d vs %d\n", kind, m, f[0], d, s16, 2 * sum);
    }
    printf("%lld %lld %lld\n", bad, n, top);
    return bad != 0;
}
"""

cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
if not cxx:
    print("cuda_host_check: no C++ compiler found, skipped")
    sys.exit(0)
rc = 0
with tempfile.TemporaryDirectory() as d:
    # units_a2words: the shared-memory rows' aligned word loads (MOLLA_KDEFS=A2WORDS) in
    # unit_q16<T, false>, against the global ones and unit_apply.
    for name, defs in [("units", []), ("units_a2words", ["-DMOLLA_X_A2WORDS"])]:
        cpp, exe = Path(d) / f"{name}.cpp", Path(d) / name
        cpp.write_text(shim + common + post_common + q16 + rows + lean + xq_rand + test)
        subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-w", *defs, "-o", str(exe), str(cpp)], check=True)
        print(f"{name}:")
        rc |= subprocess.run([str(exe)]).returncode
    dumps = []
    for defs in [["-DMOLLA_X_Q6FILE"], []]:
        cpp, exe = Path(d) / "q6.cpp", Path(d) / f"q6{len(dumps)}"
        cpp.write_text(shim + common + post_common + q16 + rows + xq_rand + q6dump)
        subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-w", *defs, "-o", str(exe), str(cpp)], check=True)
        dumps.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n"))
    same = all(len(set(line.split()[1:])) == 1 for line in dumps[0] if line)
    differ = sum(a != b for a, b in zip(*dumps)) + abs(len(dumps[0]) - len(dumps[1]))
    print(f"Q6_K padded to 224 bytes: {len(dumps[0]) - 1} units, {differ} differ from 210-byte blocks"
          + ("" if same else ", decoders disagree"))
    rc |= int(differ != 0 or not same)
    legs = []
    for defs in [[], ["-DMOLLA_LEGPAD"]]:
        cpp, exe = Path(d) / "leg.cpp", Path(d) / f"leg{len(legs)}"
        cpp.write_text(shim + common + post_common + q16 + rows + dequant + xq_rand + legdump)
        subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-w", *defs, "-o", str(exe), str(cpp)], check=True)
        legs.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n"))
    # Within a line: unit_q16 from shared and global memory and unit_apply agree.
    agree = all(len(set(line.split("|")[0].split()[2:])) == 1 for line in legs[0] if line)
    differ = sum(a != b for a, b in zip(*legs)) + abs(len(legs[0]) - len(legs[1]))
    print(f"Q8_0, Q4_0, Q5_0 padded (LEGPAD): {len(legs[0]) - 1} units, {differ} differ from the file's blocks"
          + ("" if agree else ", decoders disagree"))
    rc |= int(differ != 0 or not agree or len(legs[0]) < 300)
    cpp, exe = Path(d) / "qdump.cpp", Path(d) / "qdump"
    cpp.write_text(shim + common + post_common + q16 + qdump)
    subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-w", "-o", str(exe), str(cpp)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    bad, n, top = map(int, out.stdout.split()[-3:])
    print(f"q16_block's power-of-two scale: {bad} of {n} blocks differ from the reference ({top} quants clamped)")
    rc |= int(bad != 0 or out.returncode != 0 or top == 0)
print("cuda_host_check:", "PASS" if rc == 0 else "FAIL")
sys.exit(rc)
