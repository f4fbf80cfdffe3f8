// F16: 2 bytes per element, two to a word (rows hold a multiple of 8 elements: word aligned).
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let i = base / 4u + 4u * u;
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let v = w[i + k];
        r[2u * k] = half_to_f32(v & 0xffffu);
        r[2u * k + 1u] = half_to_f32(v >> 16u);
    }
    return r;
}
