//! GGUF-to-GGUF requantization (`molla quantize`): every weight matrix is decoded to f32 and
//! re-encoded in the target type; vectors (norms, biases, rope factors) become F32.

use crate::error::{ModelError, Result};
use gguf::{GgmlType, GgufFile, GgufWriter, TensorInfo, TensorSpec, Value};
use rayon::prelude::*;
use std::io::Write;

/// llama.cpp's `general.file_type` value for a whole-file type.
fn file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q4_K => 14,
        GgmlType::Q5_K => 16,
        GgmlType::Q6_K => 18,
        GgmlType::BF16 => 32,
        _ => 0,
    }
}

/// The type a tensor gets: the target for matrices whose rows hold whole blocks, a
/// 32-element type of similar size for rows that do not (576-wide rows are not multiples of 256,
/// as llama.cpp does), F32 for vectors.
pub fn target_type(info: &TensorInfo, target: GgmlType) -> GgmlType {
    if info.dims.len() < 2 {
        return GgmlType::F32;
    }
    if info.row_len().is_multiple_of(target.block_size()) {
        return target;
    }
    let fallback = match target {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        _ => GgmlType::Q8_0,
    };
    if info.row_len().is_multiple_of(fallback.block_size()) {
        fallback
    } else {
        GgmlType::F32
    }
}

/// Requantizes `src` into `out` as `target`. `progress(done, total, name)` is called after each tensor.
pub fn quantize_file<W: Write>(
    src: &GgufFile,
    out: W,
    target: GgmlType,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<W> {
    if !quant::supports_quantize(target) {
        return Err(ModelError::BadHParam(format!(
            "cannot quantize to {target}"
        )));
    }
    let mut metadata: Vec<(String, Value)> = src
        .metadata()
        .iter()
        .filter(|(k, _)| k != "general.file_type" && k != "general.quantization_version")
        .cloned()
        .collect();
    metadata.push(("general.file_type".into(), Value::U32(file_type(target))));
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    let specs: Vec<TensorSpec> = src
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: target_type(t, target),
        })
        .collect();
    let mut w = GgufWriter::new(out, &metadata, &specs)?;
    let total = specs.len();
    for (i, (t, spec)) in src.tensors().iter().zip(&specs).enumerate() {
        let buf = requantize(src, t, spec.ty)?;
        w.write_tensor(&buf)?;
        progress(i + 1, total, &t.name);
    }
    Ok(w.finish()?)
}

/// Decodes `t` and re-encodes it as `ty`, rows in parallel.
fn requantize(src: &GgufFile, t: &TensorInfo, ty: GgmlType) -> Result<Vec<u8>> {
    let data = src.tensor_data(t);
    let cols = t.row_len() as usize;
    let src_row_bytes = t.row_bytes() as usize;
    let dst_row_bytes = ty.bytes_for(cols as u64).ok_or_else(|| {
        ModelError::BadHParam(format!("tensor '{}' cannot be stored as {ty}", t.name))
    })? as usize;
    let mut buf = vec![0u8; t.n_rows() as usize * dst_row_bytes];
    buf.par_chunks_mut(dst_row_bytes)
        .zip(data.par_chunks(src_row_bytes))
        .try_for_each_init(
            || vec![0.0f32; cols],
            |row, (dst, src_row)| -> Result<()> {
                quant::dequantize(t.ty, src_row, row)?;
                quant::quantize(ty, row, dst)?;
                Ok(())
            },
        )?;
    Ok(buf)
}
