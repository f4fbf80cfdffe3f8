// Q4_1 (20-byte blocks of 32): f16 d at 0, f16 m at 2, qs at 4 (byte j: quant j low nibble,
// j + 16 high). Weight = q * d + m.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 4u) * 20u;
    let part = u % 4u;
    let d = f16_at(blk);
    let m = f16_at(blk + 2u);
    let q0 = u32_at(blk + 4u + 8u * (part % 2u));
    let q1 = u32_at(blk + 8u + 8u * (part % 2u));
    let sh = 4u * (part / 2u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        r[k] = f32((q0 >> (8u * k + sh)) & 15u) * d + m;
        r[k + 4u] = f32((q1 >> (8u * k + sh)) & 15u) * d + m;
    }
    return r;
}
