// Q2_K (84-byte super-blocks of 256): scales at 0 (byte s: sub-block s's scale low nibble, min
// high), qs at 16 (element e = 128n + 32j + l: bits 2j.. of byte 32n + l), f16 d at 80, f16 dmin
// at 82. Weight = (d * sc) * q - (dmin * m) for the sub-block of 16.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 32u) * 84u;
    let e0 = 8u * (u % 32u);
    let s = byte_at(blk + e0 / 16u);
    let ds = f16_at(blk + 80u) * f32(s & 15u);
    let ms = f16_at(blk + 82u) * f32(s >> 4u);
    let at = blk + 16u + 32u * (e0 / 128u) + e0 % 32u;
    let sh = 2u * ((e0 / 32u) % 4u);
    let q0 = u32_at(at);
    let q1 = u32_at(at + 4u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        r[k] = ds * f32((q0 >> (8u * k + sh)) & 3u) - ms;
        r[k + 4u] = ds * f32((q1 >> (8u * k + sh)) & 3u) - ms;
    }
    return r;
}
