// Shared by every matvec module (one per block format): bindings and byte access.
//
// Weights are the tensor's GGUF bytes, uploaded unchanged as an array of u32 words (little
// endian, padded with at least 4 zero bytes at the end). Blocks of 18, 22, 34, 110 or 210 bytes
// are not 4-byte aligned, so fields are read by byte offset: `u32_at` joins two neighbouring
// words when the offset is not a multiple of 4.

// A matrix may be split into row ranges (parts) that are bound one at a time: `rows` rows of
// this part, which starts at row `row0` of a matrix of `out_rows` rows.
struct MatParams {
    rows: u32,
    cols: u32,
    row_bytes: u32,
    // bit 0: add `bias`; bit 1: add to what `y` holds (residual); bit 2: one token only
    flags: u32,
    row0: u32,
    out_rows: u32,
    pad0: u32,
    pad1: u32,
}

struct Step {
    n: u32,
    start: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<uniform> p: MatParams;
@group(0) @binding(2) var<uniform> st: Step;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read> tokens: array<u32>;

// The 4 bytes at byte offset `off`, little endian.
fn u32_at(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if (s == 0u) {
        return w[i];
    }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

// An f16 field (2 bytes, little endian) as f32 (exact).
fn f16_at(off: u32) -> f32 {
    return half_to_f32(u32_at(off) & 0xffffu);
}

// Byte `k` (0..4) of word `v` as a signed value.
fn i8_of(v: u32, k: u32) -> f32 {
    return f32(bitcast<i32>(v << (24u - 8u * k)) >> 24u);
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
