//! ggml block formats: scalar reference dequantize, dot product and quantize.
//!
//! One module per format, named for it (`q4_k`, `f16`, ...). Each documents its byte layout, defines a
//! `Block` struct whose fields are byte arrays (so any `&[u8]` at any offset can be read: no alignment,
//! no `unsafe`), and provides `dequantize`, `dot` and, where supported, `quantize`. Those per-format
//! functions panic on inconsistent lengths; the dispatch functions in this file check lengths first and
//! return a [`QuantError`] instead, so a hostile file can never cause a panic through them.
//!
//! Dequantization is bit-exact with ggml's `dequantize_row_*` (same float operations in the same order,
//! checked against the Python `gguf` package). `quantize` for F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and
//! Q8_0 follows ggml's `quantize_row_*_ref` and is bit-exact with the Python package; the K-quant
//! quantizers (Q2_K..Q6_K) implement ggml's reference scale searches and match llama.cpp's
//! `quantize_row_q*_K_ref` byte for byte on the pinned test input (see `kquant`).
//!
//! `dot` is the reference for SIMD kernels: each block's partial sum is accumulated in f32 (with the
//! block's scales factored out where the format allows), then added to an f32 total, in order.

use std::fmt;

use gguf::GgmlType;

pub mod bf16;
pub mod f16;
pub mod f32;
mod kquant;
pub mod q16;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod simd;
mod util;

/// The operation a [`QuantError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Dequantize,
    Dot,
    Quantize,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Dequantize => "dequantize",
            Op::Dot => "dot",
            Op::Quantize => "quantize",
        })
    }
}

/// Why a dispatch call refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// This crate has no kernel for `op` on `ty`.
    #[error("{op} is not supported for {ty}")]
    Unsupported { ty: GgmlType, op: Op },
    /// The source is not a whole number of blocks (`unit` is "bytes" or "values").
    #[error("{op} {ty}: {got} source {unit} are not a whole number of {block}-{unit} blocks")]
    NotWholeBlocks {
        ty: GgmlType,
        op: Op,
        unit: &'static str,
        got: usize,
        block: usize,
    },
    /// The second buffer (`what`: destination or activations) does not match the source's size.
    #[error("{op} {ty}: {what} holds {got} {unit}, expected {expected}")]
    Length {
        ty: GgmlType,
        op: Op,
        what: &'static str,
        unit: &'static str,
        got: usize,
        expected: usize,
    },
}

impl QuantError {
    /// `Ok` when `got` is a whole number of `block`-`unit` blocks, else [`QuantError::NotWholeBlocks`].
    pub(crate) fn check_whole(
        ty: GgmlType,
        op: Op,
        unit: &'static str,
        got: usize,
        block: usize,
    ) -> Result<(), Self> {
        if got.is_multiple_of(block) {
            return Ok(());
        }
        Err(Self::NotWholeBlocks {
            ty,
            op,
            unit,
            got,
            block,
        })
    }

    /// `Ok` when `got == expected`, else [`QuantError::Length`].
    pub(crate) fn check_length(
        ty: GgmlType,
        op: Op,
        what: &'static str,
        unit: &'static str,
        got: usize,
        expected: usize,
    ) -> Result<(), Self> {
        if got == expected {
            return Ok(());
        }
        Err(Self::Length {
            ty,
            op,
            what,
            unit,
            got,
            expected,
        })
    }
}

/// Scalar dequantize kernel: whole blocks in, their elements out.
type DequantizeFn = fn(&[u8], &mut [f32]);
/// Scalar dot kernel: whole blocks · activations.
type DotFn = fn(&[u8], &[f32]) -> f32;
/// Scalar quantize kernel: whole blocks of values in, their bytes out.
type QuantizeFn = fn(&[f32], &mut [u8]);

/// The kernels of one format.
pub(crate) struct Format {
    dequantize: DequantizeFn,
    dot: DotFn,
    quantize: Option<QuantizeFn>,
}

fn format(ty: GgmlType) -> Option<Format> {
    macro_rules! fmt_of {
        ($m:ident, quantize) => {
            Format {
                dequantize: $m::dequantize,
                dot: $m::dot,
                quantize: Some($m::quantize),
            }
        };
        ($m:ident) => {
            Format {
                dequantize: $m::dequantize,
                dot: $m::dot,
                quantize: None,
            }
        };
    }
    Some(match ty {
        GgmlType::F32 => fmt_of!(f32, quantize),
        GgmlType::F16 => fmt_of!(f16, quantize),
        GgmlType::BF16 => fmt_of!(bf16, quantize),
        GgmlType::Q4_0 => fmt_of!(q4_0, quantize),
        GgmlType::Q4_1 => fmt_of!(q4_1, quantize),
        GgmlType::Q5_0 => fmt_of!(q5_0, quantize),
        GgmlType::Q5_1 => fmt_of!(q5_1, quantize),
        GgmlType::Q8_0 => fmt_of!(q8_0, quantize),
        GgmlType::Q2_K => fmt_of!(q2_k, quantize),
        GgmlType::Q3_K => fmt_of!(q3_k, quantize),
        GgmlType::Q4_K => fmt_of!(q4_k, quantize),
        GgmlType::Q5_K => fmt_of!(q5_k, quantize),
        GgmlType::Q6_K => fmt_of!(q6_k, quantize),
        _ => return None,
    })
}

/// Whether [`dequantize`] and [`dot`] accept `ty`.
pub fn supports_dequantize(ty: GgmlType) -> bool {
    format(ty).is_some()
}

/// Whether [`quantize`] accepts `ty`.
pub fn supports_quantize(ty: GgmlType) -> bool {
    format(ty).is_some_and(|f| f.quantize.is_some())
}

/// Elements per block and bytes per block of `ty` as usize.
fn sizes(ty: GgmlType) -> (usize, usize) {
    (ty.block_size() as usize, ty.type_size() as usize)
}

/// The kernels of `ty` for `op` on the blocks `src`, once `src` is a whole number of blocks and the
/// other buffer (`what`: destination or activations) holds exactly their `got` values.
pub(crate) fn checked(
    ty: GgmlType,
    op: Op,
    src: &[u8],
    what: &'static str,
    got: usize,
) -> Result<Format, QuantError> {
    let f = format(ty).ok_or(QuantError::Unsupported { ty, op })?;
    let (bs, ts) = sizes(ty);
    QuantError::check_whole(ty, op, "bytes", src.len(), ts)?;
    QuantError::check_length(ty, op, what, "values", got, src.len() / ts * bs)?;
    Ok(f)
}

/// Dequantizes `src`, a whole number of blocks of `ty`, into `dst`, which must hold exactly the
/// elements of `src`. Errors (never panics) on a length mismatch or an unsupported type.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let f = checked(ty, Op::Dequantize, src, "destination", dst.len())?;
    (f.dequantize)(src, dst);
    Ok(())
}

/// Dot product of the weights row `src` (a whole number of blocks of `ty`) with the activations `x`,
/// which must hold exactly the elements of `src`. Errors (never panics) on a length mismatch or an
/// unsupported type. Accumulates per block in f32, then into an f32 total.
pub fn dot(ty: GgmlType, src: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    let f = checked(ty, Op::Dot, src, "activations", x.len())?;
    Ok((f.dot)(src, x))
}

/// Quantizes `src` (a whole number of blocks of `ty`) into `dst`, which must be exactly
/// `ty.bytes_for(src.len())` bytes. Errors (never panics) on a length mismatch or an unsupported type.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let op = Op::Quantize;
    let quantize = format(ty)
        .and_then(|f| f.quantize)
        .ok_or(QuantError::Unsupported { ty, op })?;
    let (bs, ts) = sizes(ty);
    QuantError::check_whole(ty, op, "values", src.len(), bs)?;
    QuantError::check_length(
        ty,
        op,
        "destination",
        "bytes",
        dst.len(),
        src.len() / bs * ts,
    )?;
    quantize(src, dst);
    Ok(())
}

#[cfg(test)]
mod tests;
