// L2 latency by SM and line (the GPU machine): is an L2 round trip slower from some SMs to some
// lines (the H200's two L2 partitions), and by how much? Thread 0 of each of G blocks (one an SM)
// times K dependent ld.volatile loads of each of L lines (128 bytes apart, zeros, so each load's
// address depends on the previous value), one line after another, with clock64; the blocks run
// one at a time (a flag passes), so the L2 sees one reader.
//
//   nvcc -O3 -arch=sm_90 -o l2probe scripts/syncbench/l2probe.cu && ./l2probe
//
// Prints the histogram of per-(SM, line) latencies, and whether the lines split into two groups
// whose fast set depends on the SM (the partition), with the mean of each.
//
// Session 35 (H200): 278 cycles on average to the near half of the lines, 309 to the far half
// (240-359 in all); 56 SMs share block 0's near set, 52 have the complementary one, 24 mostly
// (0.73-0.94). So a far line costs ~30 cycles (15 ns) a round trip: not worth placing copies.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../cuda_check.h"

#define L 512
#define K 32

__global__ void probe(const unsigned* buf, unsigned* lat, int* smid, volatile unsigned* turn) {
    if (threadIdx.x != 0) return;
    while (*turn != blockIdx.x) __nanosleep(2000);
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[blockIdx.x] = id;
    unsigned j = 0;
    for (int l = 0; l < L; l++) {
        const volatile unsigned* p = buf + 32 * l;
        j = p[j];  // warm: the line in L2
        long long c0 = clock64();
        for (int k = 0; k < K; k++) j = p[j];
        long long c1 = clock64();
        lat[blockIdx.x * L + l] = (unsigned)((c1 - c0) / K) + j;
    }
    __threadfence();
    *turn = blockIdx.x + 1;
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int g = prop.multiProcessorCount;
    unsigned *buf, *lat, *turn;
    int* smid;
    CK(cudaMalloc(&buf, L * 128));
    CK(cudaMemset(buf, 0, L * 128));
    CK(cudaMalloc(&lat, (size_t)g * L * 4));
    CK(cudaMalloc(&turn, 4));
    CK(cudaMemset(turn, 0, 4));
    CK(cudaMalloc(&smid, g * 4));
    probe<<<g, 32>>>(buf, lat, smid, turn);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> h((size_t)g * L);
    std::vector<int> sm(g);
    CK(cudaMemcpy(h.data(), lat, h.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sm.data(), smid, g * 4, cudaMemcpyDeviceToHost));
    // Histogram (cycles, buckets of 20).
    std::vector<int> hist(100, 0);
    for (unsigned v : h) hist[std::min(99u, v / 20)]++;
    printf("latency histogram (SM cycles, one load, per SM and line):\n");
    for (int b = 0; b < 100; b++)
        if (hist[b]) printf("  %4d-%4d: %d\n", 20 * b, 20 * b + 19, hist[b]);
    // Split at the median: a line is "near" for an SM when under it.
    std::vector<unsigned> s = h;
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    const unsigned med = s[s.size() / 2];
    double near = 0, far = 0;
    long nn = 0, nf = 0;
    for (unsigned v : h) (v < med ? (near += v, nn++) : (far += v, nf++));
    printf("median %u: under it %ld at %.0f cycles on average, at or over %ld at %.0f\n", med, nn, near / nn, nf, far / nf);
    // Agreement of each SM's near set with block 0's (1 or 0: the same or complementary split).
    printf("each SM's near lines against block 0's (fraction of the first %d lines in the same class):\n", L);
    int same = 0, comp = 0, mixed = 0;
    for (int b = 0; b < g; b++) {
        int agree = 0;
        for (int l = 0; l < L; l++) agree += (h[(size_t)b * L + l] < med) == (h[l] < med);
        double f = (double)agree / L;
        if (f > 0.9) same++;
        else if (f < 0.1) comp++;
        else mixed++;
        printf("%s%d:%.2f", b ? " " : "  ", sm[b], f);
    }
    printf("\nSMs like block 0's: %d, complementary: %d, neither: %d\n", same, comp, mixed);
    printf("block 0's lines (1 = near), first 128: ");
    for (int l = 0; l < 128; l++) printf("%d", h[l] < med);
    printf("\n");
    return 0;
}
