// Causal grouped-query attention of the step's `n` query rows over the KV cache, one workgroup
// of 256 per (head, token); the weighted sum of values is split into 4 slices of positions (4
// loads in flight per output element instead of one long dependent chain). The cache is an array of u32 words: f32 elements (bitcast) or, with
// KV_F16, two f16 per word. Also `store`: writes the step's keys and values into the cache.
// Scores go through `scores` (one row of `capacity` per token and head).

const KV_F16: bool = false;

struct AttnParams {
    n_head: u32,
    group: u32,
    head_dim: u32,
    head_dim_v: u32,
    kv_dim: u32,
    v_dim: u32,
    capacity: u32,
    scale: f32,
    // Sliding-window layers: a query at position p sees p - window + 1 ..= p (0: all).
    window: u32,
    // Scores become softcap * tanh(s / softcap) when it is not 0 (gemma2).
    softcap: f32,
    pad1: u32,
    pad2: u32,
}

struct Step {
    n: u32,
    start: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: AttnParams;
@group(0) @binding(1) var<uniform> st: Step;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read_write> kc: array<u32>;
@group(0) @binding(4) var<storage, read_write> vc: array<u32>;
@group(0) @binding(5) var<storage, read_write> scores: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> k_new: array<f32>;
@group(0) @binding(8) var<storage, read> v_new: array<f32>;

const WGS: u32 = 256u;
const SLICES: u32 = 4u;

var<workgroup> red: array<f32, 256>;

fn k_at(i: u32) -> f32 {
    if (KV_F16) {
        return half_to_f32((kc[i >> 1u] >> (16u * (i & 1u))) & 0xffffu);
    }
    return bitcast<f32>(kc[i]);
}

fn v_at(i: u32) -> f32 {
    if (KV_F16) {
        return half_to_f32((vc[i >> 1u] >> (16u * (i & 1u))) & 0xffffu);
    }
    return bitcast<f32>(vc[i]);
}

fn reduce(tid: u32, is_max: bool) -> f32 {
    workgroupBarrier();
    for (var off = WGS / 2u; off > 0u; off >>= 1u) {
        if (tid < off) {
            if (is_max) {
                red[tid] = max(red[tid], red[tid + off]);
            } else {
                red[tid] += red[tid + off];
            }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn attention(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let h = wg.x;
    let t = wg.y;
    let kvh = h / p.group;
    let visible = st.start + t + 1u;
    let first = select(0u, visible - min(visible, p.window), p.window > 0u);
    let qo = (t * p.n_head + h) * p.head_dim;
    let so = (t * p.n_head + h) * p.capacity;
    var mx = -3.0e38;
    for (var pos = first + tid; pos < visible; pos += WGS) {
        let ko = pos * p.kv_dim + kvh * p.head_dim;
        var s = 0.0;
        for (var d = 0u; d < p.head_dim; d++) {
            s += q[qo + d] * k_at(ko + d);
        }
        s *= p.scale;
        if (p.softcap > 0.0) {
            // tanh as 1 - 2 / (e^2y + 1), clamped where f32 tanh is already +-1.
            let y = clamp(s / p.softcap, -15.0, 15.0);
            s = p.softcap * (1.0 - 2.0 / (exp(2.0 * y) + 1.0));
        }
        scores[so + pos] = s;
        mx = max(mx, s);
    }
    red[tid] = mx;
    let m = reduce(tid, true);
    var sum = 0.0;
    for (var pos = first + tid; pos < visible; pos += WGS) {
        let e = exp(scores[so + pos] - m);
        scores[so + pos] = e;
        sum += e;
    }
    red[tid] = sum;
    let inv = 1.0 / reduce(tid, false);
    storageBarrier();
    let vo = kvh * p.head_dim_v;
    let oo = (t * p.n_head + h) * p.head_dim_v;
    let slice = tid / 64u;
    let dl = tid % 64u;
    for (var d0 = 0u; d0 < p.head_dim_v; d0 += 64u) {
        let d = d0 + dl;
        var o = 0.0;
        if (d < p.head_dim_v) {
            for (var pos = first + slice; pos < visible; pos += SLICES) {
                o += scores[so + pos] * v_at(pos * p.v_dim + vo + d);
            }
        }
        red[tid] = o;
        workgroupBarrier();
        if (slice == 0u && d < p.head_dim_v) {
            out[oo + d] = (red[dl] + red[dl + 64u] + red[dl + 128u] + red[dl + 192u]) * inv;
        }
        workgroupBarrier();
    }
}

// Thread i writes word i of the step's new keys and values (positions start..start + n).
@compute @workgroup_size(64)
fn store(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = gid.x + gid.y * nwg.x * 64u;
    let per = select(1u, 2u, KV_F16);
    let kw = st.n * p.kv_dim / per;
    let vw = st.n * p.v_dim / per;
    if (i < kw) {
        let at = st.start * p.kv_dim / per + i;
        if (KV_F16) {
            kc[at] = f32_to_half(k_new[2u * i]) | (f32_to_half(k_new[2u * i + 1u]) << 16u);
        } else {
            kc[at] = bitcast<u32>(k_new[i]);
        }
    }
    if (i < vw) {
        let at = st.start * p.v_dim / per + i;
        if (KV_F16) {
            vc[at] = f32_to_half(v_new[2u * i]) | (f32_to_half(v_new[2u * i + 1u]) << 16u);
        } else {
            vc[at] = bitcast<u32>(v_new[i]);
        }
    }
}

// f16 bits (low 16 of `h`) to f32, exactly, with integer operations only: unpack2x16float needs
// a capability that some Vulkan drivers lack without SHADER_F16.
fn half_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // zero or subnormal: m * 2^-24 (exact)
        let v = f32(m) * 5.9604645e-8;
        return select(v, -v, sign != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// f32 to f16 bits, rounded to nearest even (as the CPU's f16 cache), with integer operations.
fn f32_to_half(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    let e = i32(a >> 23u) - 112;
    if (e >= 31) {
        return sign | 0x7c00u;
    }
    if (e <= 0) {
        if (e < -10) {
            return sign;
        }
        let m = (a & 0x7fffffu) | 0x800000u;
        let shift = u32(14 - e);
        var h = m >> shift;
        let rem = m & ((1u << shift) - 1u);
        let halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) {
            h += 1u;
        }
        return sign | h;
    }
    var h = (u32(e) << 10u) | ((a >> 13u) & 0x3ffu);
    let rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
        h += 1u;
    }
    return sign | h;
}
