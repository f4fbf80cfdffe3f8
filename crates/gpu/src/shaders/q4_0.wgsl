// Q4_0 (18-byte blocks of 32): f16 d at 0, qs at 2 (byte j: quant j low nibble, j + 16 high).
// Weight = (q - 8) * d.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 4u) * 18u;
    let part = u % 4u;
    let d = f16_at(blk);
    let q0 = u32_at(blk + 2u + 8u * (part % 2u));
    let q1 = u32_at(blk + 6u + 8u * (part % 2u));
    let sh = 4u * (part / 2u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        r[k] = (f32((q0 >> (8u * k + sh)) & 15u) - 8.0) * d;
        r[k + 4u] = (f32((q1 >> (8u * k + sh)) & 15u) - 8.0) * d;
    }
    return r;
}
