// Prefill matmul: Y[t][r] = sum_k X[t][k] * W[r][k] (+ bias[r]) (+ Y[t][r] when accumulating), for
// n activation rows. Tiles of 64 weight rows x 64 tokens x 32 columns: each of the 256 threads
// dequantizes one 8-weight chunk of the W tile and loads 8 activations of the X tile into shared
// memory, then accumulates a 4x4 block of outputs in f32. Tensor cores come later.

#define MM_BR 64
#define MM_BT 64
#define MM_BK 32
#define MM_PAD 4

MOLLA_KERNEL void __launch_bounds__(256) matmul(const u8* __restrict__ w, int ty, int rows, int cols, int row_bytes,
                                                         const float* __restrict__ x, int n, float* y,
                                                         const float* __restrict__ bias, int accumulate) {
    __shared__ __align__(16) float ws[MM_BK][MM_BR + MM_PAD];
    __shared__ __align__(16) float xs[MM_BK][MM_BT + MM_PAD];
    int tid = threadIdx.x;
    int r0 = blockIdx.x * MM_BR, t0 = blockIdx.y * MM_BT;
    int tx = tid & 15, ty4 = tid >> 4;  // output rows r0 + 4tx.., tokens t0 + 4ty4..
    int lr = tid >> 2, lk = tid & 3;     // loader: tile row / token lr, chunk lk
    int nch = cols >> 3;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < cols; k0 += MM_BK) {
        int c = (k0 >> 3) + lk;
        float v[8];
        if (r0 + lr < rows && c < nch) {
            dq8_rt(ty, w + (size_t)(r0 + lr) * row_bytes, c, v);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) ws[lk * 8 + j][lr] = v[j];
        if (t0 + lr < n && c < nch) {
            const float4* xp = (const float4*)(x + (size_t)(t0 + lr) * cols + 8 * c);
            float4 a = xp[0], b = xp[1];
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) xs[lk * 8 + j][lr] = v[j];
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < MM_BK; k++) {
            float4 a = *(const float4*)&ws[k][4 * tx];
            float4 b = *(const float4*)&xs[k][4 * ty4];
            float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int t = t0 + 4 * ty4 + j;
        if (t >= n) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = r0 + 4 * tx + i;
            if (r >= rows) continue;
            float v = acc[i][j];
            if (bias) v += bias[r];
            float* out = y + (size_t)t * rows + r;
            if (accumulate) v += *out;
            *out = v;
        }
    }
}
