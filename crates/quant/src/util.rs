//! Small helpers shared by the format modules: f16 fields, fixed-size field copies, rounding, and
//! splitting buffers into whole blocks.

use half::f16;

/// Decodes a little-endian f16 field to f32 (exact).
#[inline(always)]
pub(crate) fn f16_to_f32(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

/// Rounds `v` to the nearest f16 (ties to even, as numpy and ggml do) and returns its little-endian bytes.
#[inline(always)]
pub(crate) fn f32_to_f16(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// Copies `N` bytes starting at `at`. Offsets are constants of a block layout, so the range is always in
/// bounds for a whole block (the round-trip tests exercise every field).
#[inline(always)]
pub(crate) fn take<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

/// Round to nearest, ties to even: what ggml's `nearest_int` computes for the values it is given
/// (|v| < 2^22). NaN becomes 0 and huge values saturate; neither can panic.
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// Splits `src` into blocks of `B` bytes and `dst` into matching runs of `N` floats.
///
/// # Panics
/// If `src` is not a whole number of blocks or `dst` does not hold exactly their elements.
#[inline]
pub(crate) fn blocks_out<'a, 'b, const B: usize, const N: usize>(
    src: &'a [u8],
    dst: &'b mut [f32],
) -> (&'a [[u8; B]], &'b mut [[f32; N]]) {
    let n = dst.len();
    let (blocks, tail) = src.as_chunks::<B>();
    let (out, out_tail) = dst.as_chunks_mut::<N>();
    assert!(
        tail.is_empty() && out_tail.is_empty() && blocks.len() == out.len(),
        "{} bytes of {B}-byte blocks do not match {n} output values",
        src.len(),
    );
    (blocks, out)
}

/// Splits `src` into blocks of `B` bytes and `x` into matching runs of `N` floats.
///
/// # Panics
/// If `src` is not a whole number of blocks or `x` does not hold exactly their elements.
#[inline]
pub(crate) fn blocks_in<'a, 'b, const B: usize, const N: usize>(
    src: &'a [u8],
    x: &'b [f32],
) -> (&'a [[u8; B]], &'b [[f32; N]]) {
    let (blocks, tail) = src.as_chunks::<B>();
    let (xs, x_tail) = x.as_chunks::<N>();
    assert!(
        tail.is_empty() && x_tail.is_empty() && blocks.len() == xs.len(),
        "{} bytes of {B}-byte blocks do not match {} activations",
        src.len(),
        x.len()
    );
    (blocks, xs)
}

/// Splits `src` into runs of `N` floats and `dst` into matching blocks of `B` bytes.
///
/// # Panics
/// If `src` is not a whole number of blocks or `dst` does not have exactly their bytes.
#[inline]
pub(crate) fn runs_blocks<'a, 'b, const N: usize, const B: usize>(
    src: &'a [f32],
    dst: &'b mut [u8],
) -> (&'a [[f32; N]], &'b mut [[u8; B]]) {
    let n = dst.len();
    let (xs, x_tail) = src.as_chunks::<N>();
    let (blocks, tail) = dst.as_chunks_mut::<B>();
    assert!(
        tail.is_empty() && x_tail.is_empty() && blocks.len() == xs.len(),
        "{} values do not match {n} bytes of {B}-byte blocks",
        src.len(),
    );
    (xs, blocks)
}

/// Copies `field` into `b` at `at` (the write-side twin of [`take`]).
#[inline(always)]
pub(crate) fn put(b: &mut [u8], at: usize, field: &[u8]) {
    b[at..at + field.len()].copy_from_slice(field);
}

/// Splits 16 bytes into 32 nibbles: byte `j` gives element `j` (low nibble) and `j + 16` (high nibble).
/// The layout of Q4_0, Q4_1 and the low bits of Q5_0, Q5_1.
#[inline(always)]
pub(crate) fn unpack_nibbles(qs: &[u8; 16]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for (j, &b) in qs.iter().enumerate() {
        q[j] = b & 0x0f;
        q[j + 16] = b >> 4;
    }
    q
}

/// Inverse of [`unpack_nibbles`] for quants below 16 (higher bits are dropped).
#[inline(always)]
pub(crate) fn pack_nibbles(q: &[u8; 32]) -> [u8; 16] {
    let mut qs = [0u8; 16];
    for (j, b) in qs.iter_mut().enumerate() {
        *b = (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4);
    }
    qs
}

/// Bit 4 of each of 32 quants as a little-endian u32 (bit `i` for element `i`): Q5_0 and Q5_1's `qh`.
#[inline(always)]
pub(crate) fn pack_high_bits(q: &[u8; 32]) -> [u8; 4] {
    let mut qh = 0u32;
    for (i, &v) in q.iter().enumerate() {
        qh |= u32::from((v >> 4) & 1) << i;
    }
    qh.to_le_bytes()
}

/// Adds bit `i` of the little-endian `qh` as bit 4 of quant `i`.
#[inline(always)]
pub(crate) fn add_high_bits(q: &mut [u8; 32], qh: [u8; 4]) {
    let qh = u32::from_le_bytes(qh);
    for (i, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> i) & 1) as u8) << 4;
    }
}
