// BF16: the top 16 bits of an f32, two to a word.
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let i = base / 4u + 4u * u;
    var r: array<f32, 8>;
    for (var k = 0u; k < 4u; k++) {
        let v = w[i + k];
        r[2u * k] = bitcast<f32>(v << 16u);
        r[2u * k + 1u] = bitcast<f32>(v & 0xffff0000u);
    }
    return r;
}
