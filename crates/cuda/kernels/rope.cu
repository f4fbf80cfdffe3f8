// Rotary embedding of q (in place) and k, and the store of k and v into the f16 KV cache at
// positions pos0 + t. pos0 is read from device memory so a captured decode graph can be replayed.
// Angles are pos * freq in f64 (freqs as the CPU's Rope computes them), cos/sin rounded to f32.
// Grid (token, head): blocks y < n_head + n_head_kv rotate one q or k head, the last one copies v.

extern "C" __global__ void rope_store(float* q, const float* __restrict__ k, const float* __restrict__ v,
                                      u16* kc, u16* vc, const int* pos0p, const double* __restrict__ freqs,
                                      int n_head, int n_head_kv, int hd, int hdv, int n_rot, int neox) {
    int t = blockIdx.x, head = blockIdx.y;
    int pos = *pos0p + t;
    int kv_dim = n_head_kv * hd, v_dim = n_head_kv * hdv;
    if (head == n_head + n_head_kv) {
        const float* vt = v + (size_t)t * v_dim;
        u16* vd = vc + (size_t)pos * v_dim;
        for (int j = threadIdx.x; j < v_dim; j += blockDim.x) vd[j] = f2h(vt[j]);
        return;
    }
    bool is_q = head < n_head;
    float* qt = q + (size_t)t * n_head * hd + (size_t)head * hd;
    const float* src = is_q ? qt : k + (size_t)t * kv_dim + (size_t)(head - n_head) * hd;
    u16* kd = kc + (size_t)pos * kv_dim + (size_t)(head - n_head) * hd;
    int half = n_rot >> 1;
    for (int i = threadIdx.x; i < (hd >> 1); i += blockDim.x) {
        bool rot = i < half;
        int a, b;
        if (neox) {
            a = rot ? i : n_rot + 2 * (i - half);
            b = rot ? i + half : a + 1;
        } else {
            a = 2 * i;
            b = a + 1;
        }
        float x0 = src[a], x1 = src[b], y0 = x0, y1 = x1;
        if (rot) {
            double th = (double)pos * freqs[i];
            float c = (float)cos(th), s = (float)sin(th);
            y0 = x0 * c - x1 * s;
            y1 = x0 * s + x1 * c;
        }
        if (is_q) {
            qt[a] = y0;
            qt[b] = y1;
        } else {
            kd[a] = f2h(y0);
            kd[b] = f2h(y1);
        }
    }
}
