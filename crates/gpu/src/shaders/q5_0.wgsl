// Q5_0 (22-byte blocks of 32): f16 d at 0, qh (u32, bit i: bit 4 of quant i) at 2, qs at 6
// (as Q4_0). Weight = (q - 16) * d.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 4u) * 22u;
    let part = u % 4u;
    let d = f16_at(blk);
    let qh = u32_at(blk + 2u);
    let q0 = u32_at(blk + 6u + 8u * (part % 2u));
    let q1 = u32_at(blk + 10u + 8u * (part % 2u));
    let sh = 4u * (part / 2u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let i = 8u * part + k;
        let a = ((q0 >> (8u * k + sh)) & 15u) | (((qh >> i) & 1u) << 4u);
        let b = ((q1 >> (8u * k + sh)) & 15u) | (((qh >> (i + 4u)) & 1u) << 4u);
        r[k] = (f32(a) - 16.0) * d;
        r[k + 4u] = (f32(b) - 16.0) * d;
    }
    return r;
}
