// Q5_1 (24-byte blocks of 32): f16 d at 0, f16 m at 2, qh (u32) at 4, qs at 8 (as Q5_0).
// Weight = q * d + m.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 4u) * 24u;
    let part = u % 4u;
    let d = f16_at(blk);
    let m = f16_at(blk + 2u);
    let qh = u32_at(blk + 4u);
    let q0 = u32_at(blk + 8u + 8u * (part % 2u));
    let q1 = u32_at(blk + 12u + 8u * (part % 2u));
    let sh = 4u * (part / 2u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let i = 8u * part + k;
        let a = ((q0 >> (8u * k + sh)) & 15u) | (((qh >> i) & 1u) << 4u);
        let b = ((q1 >> (8u * k + sh)) & 15u) | (((qh >> (i + 4u)) & 1u) << 4u);
        r[k] = f32(a) * d + m;
        r[k + 4u] = f32(b) * d + m;
    }
    return r;
}
