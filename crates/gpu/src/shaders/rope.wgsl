// Rotary embedding of the step's query and key heads in place, one thread per rotated pair.
// `table` holds (cos, sin) per position and frequency, computed on the CPU in f64 exactly as the
// CPU backend does. Normal style rotates (2i, 2i + 1), NeoX (i, i + n_rot / 2).

struct RopeParams {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_rot: u32,
    neox: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

struct Step {
    n: u32,
    start: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: RopeParams;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(3) var<storage, read_write> k: array<f32>;
@group(0) @binding(4) var<storage, read> table: array<f32>;

@compute @workgroup_size(64)
fn rope(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let half = p.n_rot / 2u;
    let heads = p.n_head + p.n_head_kv;
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= st.n * heads * half) {
        return;
    }
    let j = i % half;
    let h = (i / half) % heads;
    let t = i / (half * heads);
    let at = 2u * ((st.start + t) * half + j);
    let c = table[at];
    let s = table[at + 1u];
    var a = 2u * j;
    var b = a + 1u;
    if (p.neox != 0u) {
        a = j;
        b = j + half;
    }
    if (h < p.n_head) {
        let o = (t * p.n_head + h) * p.head_dim;
        let x0 = q[o + a];
        let x1 = q[o + b];
        q[o + a] = x0 * c - x1 * s;
        q[o + b] = x0 * s + x1 * c;
    } else {
        let o = (t * p.n_head_kv + h - p.n_head) * p.head_dim;
        let x0 = k[o + a];
        let x1 = k[o + b];
        k[o + a] = x0 * c - x1 * s;
        k[o + b] = x0 * s + x1 * c;
    }
}
