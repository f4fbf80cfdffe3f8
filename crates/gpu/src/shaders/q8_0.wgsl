// Q8_0 (34-byte blocks of 32): f16 d at 0, 32 signed bytes at 2. Weight = q * d.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 4u) * 34u;
    let d = f16_at(blk);
    let q0 = u32_at(blk + 2u + 8u * (u % 4u));
    let q1 = u32_at(blk + 6u + 8u * (u % 4u));
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        r[k] = i8_of(q0, k) * d;
        r[k + 4u] = i8_of(q1, k) * d;
    }
    return r;
}
