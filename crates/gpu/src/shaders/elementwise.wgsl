// Element-wise ops over the step's `n` rows of `cols`: SwiGLU (a = silu(a) * b), GeGLU
// (a = gelu_tanh(a) * b), add (a += b) and scale (a *= factor).

struct EwParams {
    cols: u32,
    factor: f32,
    // softcap, scale: one row (the last token's logits), not the step's n.
    single: u32,
    pad2: u32,
}

struct Step {
    n: u32,
    start: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: EwParams;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;

@compute @workgroup_size(64)
fn swiglu(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= st.n * p.cols) {
        return;
    }
    let g = a[i];
    a[i] = g / (1.0 + exp(-g)) * b[i];
}

@compute @workgroup_size(64)
fn add(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= st.n * p.cols) {
        return;
    }
    a[i] += b[i];
}

// tanh(u) as 1 - 2 / (exp(2u) + 1), u clamped where f32 tanh is already +-1.
@compute @workgroup_size(64)
fn geglu(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= st.n * p.cols) {
        return;
    }
    let g = a[i];
    let u = 0.7978845608 * (g + 0.044715 * g * g * g);
    let t = 1.0 - 2.0 / (exp(2.0 * clamp(u, -15.0, 15.0)) + 1.0);
    a[i] = 0.5 * g * (1.0 + t) * b[i];
}

@compute @workgroup_size(64)
fn scale(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= select(st.n * p.cols, p.cols, p.single != 0u)) {
        return;
    }
    a[i] *= p.factor;
}

@compute @workgroup_size(64)
fn softcap(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= select(st.n * p.cols, p.cols, p.single != 0u)) {
        return;
    }
    let y = clamp(a[i] / p.factor, -15.0, 15.0);
    a[i] = p.factor * (1.0 - 2.0 / (exp(2.0 * y) + 1.0));
}
