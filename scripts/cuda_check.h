// CK(call): a CUDA runtime call whose failure prints the file, line, call and error and exits 1.
// Shared by the standalone device benchmarks (scripts/mvbench, scripts/syncbench, scripts/pdlbench).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
