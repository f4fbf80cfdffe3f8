// Q6_K (210-byte super-blocks of 256): ql at 0, qh at 128, 16 signed 8-bit scales at 192, f16 d
// at 208. Element e = 128n + 32k + l: low 4 bits in ql[64n + 32(k % 2) + l] (nibble k / 2), high
// 2 bits in qh[32n + l] (bits 2k..). Weight = (d * sc) * (q - 32) for the sub-block of 16.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 32u) * 210u;
    let e0 = 8u * (u % 32u);
    let n = e0 / 128u;
    let kk = (e0 / 32u) % 4u;
    let l = e0 % 32u;
    let sc = f32(bitcast<i32>(byte_at(blk + 192u + e0 / 16u) << 24u) >> 24u);
    let ds = f16_at(blk + 208u) * sc;
    let at = blk + 64u * n + 32u * (kk % 2u) + l;
    let sl = 4u * (kk / 2u);
    let ah = blk + 128u + 32u * n + l;
    let sh = 2u * kk;
    let q0 = u32_at(at);
    let q1 = u32_at(at + 4u);
    let h0 = u32_at(ah);
    let h1 = u32_at(ah + 4u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let a = ((q0 >> (8u * k + sl)) & 15u) | (((h0 >> (8u * k + sh)) & 3u) << 4u);
        let b = ((q1 >> (8u * k + sl)) & 15u) | (((h1 >> (8u * k + sh)) & 3u) << 4u);
        r[k] = ds * (f32(a) - 32.0);
        r[k + 4u] = ds * (f32(b) - 32.0);
    }
    return r;
}
