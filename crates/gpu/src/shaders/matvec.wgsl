// y[t][row] = dot(weights[row], x[t]) for the step's tokens. A workgroup of 64 takes 8 rows,
// 8 threads a row: each thread decodes every 8th weight unit of its row (8 elements,
// `dequant8` of the format module) and the 8 partial sums are reduced in workgroup memory (no
// subgroup operations, so any adapter runs it). `matvec` takes up to TT tokens per weight read
// (prefill); `matvec1` is the one-token form (decode). `embed`: rows picked by token id.

const WG: u32 = 64u;
const LANES: u32 = 8u;
const ROWS: u32 = 8u;
const TT: u32 = 8u;

var<workgroup> partial: array<f32, 512>;

// Adds the bias and/or what `y` holds, as `p.flags` says, and stores.
fn finish(t: u32, row: u32, sum: f32) {
    var v = sum;
    let o = t * p.out_rows + p.row0 + row;
    if ((p.flags & 1u) != 0u) {
        v += bias[p.row0 + row];
    }
    if ((p.flags & 2u) != 0u) {
        v += y[o];
    }
    y[o] = v;
}

@compute @workgroup_size(64)
fn matvec1(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let lane = tid % LANES;
    let row = (wg.x + wg.y * nwg.x) * ROWS + tid / LANES;
    let t = select(st.n - 1u, 0u, (p.flags & 4u) != 0u);
    var acc = 0.0;
    if (row < p.rows) {
        let units = p.cols / 8u;
        let base = row * p.row_bytes;
        let xo = t * p.cols;
        for (var u = lane; u < units; u += LANES) {
            let wv = dequant8(base, u);
            let xi = xo + 8u * u;
            acc += wv[0] * x[xi] + wv[1] * x[xi + 1u] + wv[2] * x[xi + 2u] + wv[3] * x[xi + 3u]
                + wv[4] * x[xi + 4u] + wv[5] * x[xi + 5u] + wv[6] * x[xi + 6u] + wv[7] * x[xi + 7u];
        }
    }
    partial[tid] = acc;
    workgroupBarrier();
    for (var off = LANES / 2u; off > 0u; off >>= 1u) {
        if (lane < off) {
            partial[tid] += partial[tid + off];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        finish(select(t, 0u, (p.flags & 4u) != 0u), row, partial[tid]);
    }
}

@compute @workgroup_size(64)
fn matvec(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let lane = tid % LANES;
    let row = (wg.x + wg.y * nwg.x) * ROWS + tid / LANES;
    let n = select(st.n, 1u, (p.flags & 4u) != 0u);
    let t0 = wg.z * TT;
    if (t0 >= n) {
        return;
    }
    let nt = min(TT, n - t0);
    var acc: array<f32, 8>;
    if (row < p.rows) {
        let units = p.cols / 8u;
        let base = row * p.row_bytes;
        for (var u = lane; u < units; u += LANES) {
            let wv = dequant8(base, u);
            for (var t = 0u; t < nt; t++) {
                let xi = (t0 + t) * p.cols + 8u * u;
                acc[t] += wv[0] * x[xi] + wv[1] * x[xi + 1u] + wv[2] * x[xi + 2u]
                    + wv[3] * x[xi + 3u] + wv[4] * x[xi + 4u] + wv[5] * x[xi + 5u]
                    + wv[6] * x[xi + 6u] + wv[7] * x[xi + 7u];
            }
        }
    }
    for (var t = 0u; t < TT; t++) {
        partial[t * WG + tid] = acc[t];
    }
    workgroupBarrier();
    for (var off = LANES / 2u; off > 0u; off >>= 1u) {
        if (lane < off) {
            for (var t = 0u; t < TT; t++) {
                partial[t * WG + tid] += partial[t * WG + tid + off];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        for (var t = 0u; t < nt; t++) {
            finish(t0 + t, row, partial[t * WG + tid]);
        }
    }
}

@compute @workgroup_size(64)
fn embed(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let units = p.cols / 8u;
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= st.n * units) {
        return;
    }
    let t = i / units;
    let u = i % units;
    let id = tokens[t];
    if (id < p.row0 || id >= p.row0 + p.rows) {
        return;
    }
    let v = dequant8((id - p.row0) * p.row_bytes, u);
    let o = t * p.cols + 8u * u;
    for (var k = 0u; k < 8u; k++) {
        y[o + k] = v[k];
    }
}
