// y = x / sqrt(mean(x^2) + eps) * w, one workgroup per row: a token's row, or with
// `per_token` > 1 one of the token's `per_token` rows (per-head q/k norms; workgroup (h, t)).
// With `last_only`, only the last of the step's `n` rows, written as row 0 (the logits of the
// last token).

struct NormParams {
    cols: u32,
    eps: f32,
    last_only: u32,
    per_token: u32,
}

struct Step {
    n: u32,
    start: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: NormParams;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn rms_norm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let last = p.last_only != 0u;
    let row = wg.x + wg.y * nwg.x;
    if (!last && row >= st.n * max(p.per_token, 1u)) {
        return;
    }
    let xo = select(row, st.n - 1u, last) * p.cols;
    let yo = select(row, 0u, last) * p.cols;
    var s = 0.0;
    for (var i = tid; i < p.cols; i += 256u) {
        let v = x[xo + i];
        s += v * v;
    }
    red[tid] = s;
    workgroupBarrier();
    for (var off = 128u; off > 0u; off >>= 1u) {
        if (tid < off) {
            red[tid] += red[tid + off];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(red[0] / f32(p.cols) + p.eps);
    for (var i = tid; i < p.cols; i += 256u) {
        y[yo + i] = x[xo + i] * scale * g[i];
    }
}
