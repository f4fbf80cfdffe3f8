// F32: 4 bytes per element (rows are word aligned).
fn dequant8(base: u32, u: u32) -> array<f32, 8> {
    let i = base / 4u + 8u * u;
    var r: array<f32, 8>;
    for (var k = 0u; k < 8u; k++) {
        r[k] = bitcast<f32>(w[i + k]);
    }
    return r;
}
