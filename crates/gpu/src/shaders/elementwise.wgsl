// Element-wise ops over the step's `n` rows of `cols`: SwiGLU (a = silu(a) * b), GeGLU
// (a = gelu_tanh(a) * b), add (a += b), scale (a *= factor) and softcap (a = c tanh(a / c)).

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

const NONE: u32 = 0xffffffffu;

// The element of thread `gid`, or NONE past the step's rows (past one row with `single`).
fn element(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    let i = gid.x + gid.y * nwg.x * 64u;
    return select(NONE, i, i < select(st.n * p.cols, p.cols, p.single != 0u));
}

// tanh(x) as 1 - 2 / (exp(2x) + 1), x clamped where f32 tanh is already +-1.
fn tanh_clamped(x: f32) -> f32 {
    return 1.0 - 2.0 / (exp(2.0 * clamp(x, -15.0, 15.0)) + 1.0);
}

@compute @workgroup_size(64)
fn swiglu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i != NONE) {
        a[i] = a[i] / (1.0 + exp(-a[i])) * b[i];
    }
}

@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i != NONE) {
        a[i] += b[i];
    }
}

@compute @workgroup_size(64)
fn geglu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i != NONE) {
        let g = a[i];
        a[i] = 0.5 * g * (1.0 + tanh_clamped(0.7978845608 * (g + 0.044715 * g * g * g))) * b[i];
    }
}

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i != NONE) {
        a[i] *= p.factor;
    }
}

@compute @workgroup_size(64)
fn softcap(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element(gid, nwg);
    if (i != NONE) {
        a[i] = p.factor * tanh_clamped(a[i] / p.factor);
    }
}
