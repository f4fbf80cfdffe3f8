// Q4_K and Q5_K: their super-blocks pack the 6-bit scales and mins of the 8 sub-blocks in the
// same 12 bytes at offset 4 (ggml's get_scale_min_k4).

// Scale and min of sub-block j (0..8) from the 12 bytes at blk + 4.
fn scale_min(blk: u32, j: u32) -> vec2<u32> {
    let s = blk + 4u;
    if (j < 4u) {
        return vec2<u32>(byte_at(s + j) & 63u, byte_at(s + j + 4u) & 63u);
    }
    let b = byte_at(s + j + 4u);
    return vec2<u32>(
        (b & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u),
        (b >> 4u) | ((byte_at(s + j) >> 6u) << 4u),
    );
}
