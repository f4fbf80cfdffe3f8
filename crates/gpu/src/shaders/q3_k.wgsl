// Q3_K (110-byte super-blocks of 256): hmask at 0 (bit e / 32 of byte e % 32: high bit of
// element e), qs at 32 (low 2 bits, as Q2_K), 16 packed 6-bit scales at 96, f16 d at 108.
// Quant = low2 - 4 when the high bit is clear, else low2. Weight = (d * (sc - 32)) * q.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let blk = base + (u / 32u) * 110u;
    let e0 = 8u * (u % 32u);
    let s = e0 / 16u;
    let lo = (byte_at(blk + 96u + s % 8u) >> (4u * (s / 8u))) & 15u;
    let hi = (byte_at(blk + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
    let ds = f16_at(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
    let at = blk + 32u + 32u * (e0 / 128u) + e0 % 32u;
    let sh = 2u * ((e0 / 32u) % 4u);
    let hb = e0 / 32u;
    let q0 = u32_at(at);
    let q1 = u32_at(at + 4u);
    let h0 = u32_at(blk + e0 % 32u);
    let h1 = u32_at(blk + 4u + e0 % 32u);
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let a = i32((q0 >> (8u * k + sh)) & 3u) - select(4, 0, ((h0 >> (8u * k + hb)) & 1u) != 0u);
        let b = i32((q1 >> (8u * k + sh)) & 3u) - select(4, 0, ((h1 >> (8u * k + hb)) & 1u) != 0u);
        r[k] = ds * f32(a);
        r[k + 4u] = ds * f32(b);
    }
    return r;
}
