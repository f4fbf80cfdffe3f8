// Q4_K (144-byte super-blocks of 256): f16 d at 0, f16 dmin at 2, 12 packed 6-bit scales and
// mins at 4, qs at 16 (byte 32c + l: element 64c + l low nibble, 64c + 32 + l high).
// Weight = (d * sc) * q - (dmin * m) for the sub-block of 32.

fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 32u) * 144u;
    let e0 = 8u * (u % 32u);
    let sm = scale_min(blk, e0 / 32u);
    let ds = f16_at(blk) * f32(sm.x);
    let ms = f16_at(blk + 2u) * f32(sm.y);
    let at = blk + 16u + 32u * (e0 / 64u) + e0 % 32u;
    let sh = select(0u, 4u, e0 % 64u >= 32u);
    let q0 = u32_at(at);
    let q1 = u32_at(at + 4u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        r[k] = ds * f32((q0 >> (8u * k + sh)) & 15u) - ms;
        r[k + 4u] = ds * f32((q1 >> (8u * k + sh)) & 15u) - ms;
    }
    return r;
}
