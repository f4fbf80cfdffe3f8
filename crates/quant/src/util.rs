//! Small helpers shared by the format modules: f16 fields, fixed-size field copies, rounding,
//! splitting buffers into whole blocks, the `Block` struct scaffolding ([`block_struct`]) and the
//! whole-row drivers that run one block's math over every block of a row.

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

/// Runs `f` on every whole block of `src` and its run of `dst`, in order.
///
/// # Panics
/// As [`blocks_out`].
#[inline(always)]
pub(crate) fn dequantize_blocks<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    mut f: impl FnMut(&[u8; B], &mut [f32; N]),
) {
    let (blocks, out) = blocks_out::<B, N>(src, dst);
    for (b, y) in blocks.iter().zip(out) {
        f(b, y);
    }
}

/// The f32 sum, in block order, of `f(block, activations)` over every whole block of `src`.
///
/// # Panics
/// As [`blocks_in`].
#[inline(always)]
pub(crate) fn dot_blocks<const B: usize, const N: usize>(
    src: &[u8],
    x: &[f32],
    f: impl Fn(&[u8; B], &[f32; N]) -> f32,
) -> f32 {
    let (blocks, xs) = blocks_in::<B, N>(src, x);
    let mut sum = 0.0f32;
    for (b, x) in blocks.iter().zip(xs) {
        sum += f(b, x);
    }
    sum
}

/// Writes `f(values)` for every whole run of `N` values of `src` into its block of `dst`.
///
/// # Panics
/// As [`runs_blocks`].
#[inline(always)]
pub(crate) fn quantize_blocks<const N: usize, const B: usize>(
    src: &[f32],
    dst: &mut [u8],
    f: impl Fn(&[f32; N]) -> [u8; B],
) {
    let (xs, blocks) = runs_blocks::<N, B>(src, dst);
    for (x, b) in xs.iter().zip(blocks) {
        *b = f(x);
    }
}

/// Dequantizes blocks whose element `e` is `d_s * q_e`, `s` its sub-block (`N / M` elements);
/// `parts` gives a block's `M` sub-block scales and `N` signed quants.
#[inline(always)]
pub(crate) fn dequantize_scaled<const B: usize, const N: usize, const M: usize>(
    src: &[u8],
    dst: &mut [f32],
    parts: impl Fn(&[u8; B]) -> ([f32; M], [i8; N]),
) {
    dequantize_blocks(src, dst, |b, y: &mut [f32; N]| {
        let (sub, q) = parts(b);
        for (e, (y, q)) in y.iter_mut().zip(q).enumerate() {
            *y = sub[e / (N / M)] * f32::from(q);
        }
    });
}

/// Dot product for the blocks of [`dequantize_scaled`]: per sub-block `d_s * Σ q·x`, summed per block
/// in f32, then into an f32 total.
#[inline(always)]
pub(crate) fn dot_scaled<const B: usize, const N: usize, const M: usize>(
    src: &[u8],
    x: &[f32],
    parts: impl Fn(&[u8; B]) -> ([f32; M], [i8; N]),
) -> f32 {
    dot_blocks(src, x, |b, x: &[f32; N]| {
        let (sub, q) = parts(b);
        let mut block = 0.0f32;
        for (d, (q, x)) in sub.iter().zip(q.chunks(N / M).zip(x.chunks(N / M))) {
            let mut s = 0.0f32;
            for (&q, x) in q.iter().zip(x) {
                s += f32::from(q) * x;
            }
            block += d * s;
        }
        block
    })
}

/// Dequantizes blocks whose element `e` is `d_s * q_e - m_s`, `s` its sub-block (`N / M` elements);
/// `parts` gives a block's `M` sub-block `(d_s, m_s)` and `N` unsigned quants.
#[inline(always)]
pub(crate) fn dequantize_affine<const B: usize, const N: usize, const M: usize>(
    src: &[u8],
    dst: &mut [f32],
    parts: impl Fn(&[u8; B]) -> ([(f32, f32); M], [u8; N]),
) {
    dequantize_blocks(src, dst, |b, y: &mut [f32; N]| {
        let (sub, q) = parts(b);
        for (e, (y, q)) in y.iter_mut().zip(q).enumerate() {
            let (d, m) = sub[e / (N / M)];
            *y = d * f32::from(q) - m;
        }
    });
}

/// Dot product for the blocks of [`dequantize_affine`]: per sub-block `d_s * Σ q·x - m_s * Σ x`,
/// summed per block in f32, then into an f32 total.
#[inline(always)]
pub(crate) fn dot_affine<const B: usize, const N: usize, const M: usize>(
    src: &[u8],
    x: &[f32],
    parts: impl Fn(&[u8; B]) -> ([(f32, f32); M], [u8; N]),
) -> f32 {
    dot_blocks(src, x, |b, x: &[f32; N]| {
        let (sub, q) = parts(b);
        let mut block = 0.0f32;
        for (&(d, m), (q, x)) in sub.iter().zip(q.chunks(N / M).zip(x.chunks(N / M))) {
            let (mut sqx, mut sx) = (0.0f32, 0.0f32);
            for (&q, x) in q.iter().zip(x) {
                sqx += f32::from(q) * x;
                sx += x;
            }
            block += d * sqx - m * sx;
        }
        block
    })
}

/// Defines a format's `Block`: a `#[repr(C)]` struct of byte-array fields, each at the offset given
/// (checked at compile time against the struct layout, whose size must be `BLOCK_BYTES`), with
/// `from_bytes` and `to_bytes`.
macro_rules! block_struct {
    ($($field:ident: [u8; $n:expr] @ $at:expr),+ $(,)?) => {
        /// One block, field by field (see the module docs).
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Block {
            $(pub $field: [u8; $n],)+
        }

        const _: () = {
            assert!(size_of::<Block>() == BLOCK_BYTES);
            $(assert!(std::mem::offset_of!(Block, $field) == $at);)+
        };

        impl Block {
            /// Reads a block from its bytes.
            pub fn from_bytes(b: &[u8; BLOCK_BYTES]) -> Self {
                Self {
                    $($field: $crate::util::take(b, $at),)+
                }
            }

            /// The block's bytes.
            pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
                let mut b = [0u8; BLOCK_BYTES];
                $($crate::util::put(&mut b, $at, &self.$field);)+
                b
            }
        }
    };
}
pub(crate) use block_struct;

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
