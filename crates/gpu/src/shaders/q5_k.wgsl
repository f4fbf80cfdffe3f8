// Q5_K (176-byte super-blocks of 256): f16 d at 0, f16 dmin at 2, 12 packed 6-bit scales and
// mins at 4 (as Q4_K), qh at 16 (bit e / 32 of byte e % 32: bit 4 of element e), qs at 48 (as
// Q4_K's). Weight = (d * sc) * q - (dmin * m) for the sub-block of 32.

fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 32u) * 176u;
    let e0 = 8u * (u % 32u);
    let sm = scale_min(blk, e0 / 32u);
    let ds = f16_at(blk) * f32(sm.x);
    let ms = f16_at(blk + 2u) * f32(sm.y);
    let at = blk + 48u + 32u * (e0 / 64u) + e0 % 32u;
    let sh = select(0u, 4u, e0 % 64u >= 32u);
    let hb = e0 / 32u;
    let q0 = u32_at(at);
    let q1 = u32_at(at + 4u);
    let h0 = u32_at(blk + 16u + e0 % 32u);
    let h1 = u32_at(blk + 20u + e0 % 32u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let a = ((q0 >> (8u * k + sh)) & 15u) | (((h0 >> (8u * k + hb)) & 1u) << 4u);
        let b = ((q1 >> (8u * k + sh)) & 15u) | (((h1 >> (8u * k + hb)) & 1u) << 4u);
        r[k] = ds * f32(a) - ms;
        r[k + 4u] = ds * f32(b) - ms;
    }
    return r;
}
