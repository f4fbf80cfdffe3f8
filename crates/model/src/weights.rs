//! Tensors bound by name, with their shapes checked against the hyper-parameters.

use crate::error::{ModelError, Result};
use gguf::{GgmlType, GgufFile, TensorInfo};

/// A weight matrix (or vector) left in its file encoding: rows of `cols` elements, `row_bytes` each.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    /// Offset of the first byte in the file's mapping.
    offset: usize,
}

impl Matrix {
    /// The encoded bytes of the whole matrix, inside `file` (the file this matrix was bound from).
    pub fn bytes<'a>(&self, file: &'a GgufFile) -> &'a [u8] {
        let len = self.rows * self.row_bytes;
        file.bytes()
            .get(self.offset..self.offset + len)
            .unwrap_or(&[])
    }

    /// Rows `first..first + count` of this matrix as a matrix of their own (a fused tensor's
    /// part: q, k and v of `attn_qkv`, gate and up of a doubled `ffn_up`).
    pub fn rows_view(&self, first: usize, count: usize) -> Matrix {
        Matrix {
            name: format!("{}[{first}..{}]", self.name, first + count),
            rows: count.min(self.rows.saturating_sub(first)),
            offset: self.offset + first.min(self.rows) * self.row_bytes,
            ..self.clone()
        }
    }

    /// The encoded bytes of row `r`.
    pub fn row<'a>(&self, file: &'a GgufFile, r: usize) -> &'a [u8] {
        let start = self.offset + r * self.row_bytes;
        file.bytes()
            .get(start..start + self.row_bytes)
            .unwrap_or(&[])
    }

    /// The encoded bytes of `count` consecutive rows starting at row `first`.
    pub fn rows_bytes<'a>(&self, file: &'a GgufFile, first: usize, count: usize) -> &'a [u8] {
        let start = self.offset + first * self.row_bytes;
        file.bytes()
            .get(start..start + count * self.row_bytes)
            .unwrap_or(&[])
    }
}

/// Binds tensors of one file by name, checking type support and shape.
pub struct Binder<'a> {
    pub file: &'a GgufFile,
}

impl Binder<'_> {
    fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn check_shape(info: &TensorInfo, expected: &[u64]) -> Result<()> {
        if info.dims != expected {
            return Err(ModelError::Shape {
                name: info.name.clone(),
                found: info.dims.clone(),
                expected: expected.to_vec(),
            });
        }
        Ok(())
    }

    fn to_matrix(&self, info: &TensorInfo) -> Result<Matrix> {
        if !quant::supports_dequantize(info.ty) {
            return Err(ModelError::UnsupportedType {
                name: info.name.clone(),
                ty: info.ty,
            });
        }
        let too_big = |_| ModelError::BadHParam(format!("tensor '{}' is too large", info.name));
        Ok(Matrix {
            name: info.name.clone(),
            ty: info.ty,
            rows: usize::try_from(info.n_rows()).map_err(too_big)?,
            cols: usize::try_from(info.row_len()).map_err(too_big)?,
            row_bytes: usize::try_from(info.row_bytes()).map_err(too_big)?,
            offset: usize::try_from(self.file.data_offset() + info.offset).map_err(too_big)?,
        })
    }

    /// A matrix of `rows` rows of `cols` elements (GGUF dims `[cols, rows]`).
    pub fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Matrix> {
        let info = self.info(name)?;
        Self::check_shape(info, &[cols as u64, rows as u64])?;
        self.to_matrix(info)
    }

    /// A matrix whose row count is read from the file (the vocabulary of an embedding).
    pub fn matrix_any_rows(&self, name: &str, cols: usize) -> Result<Matrix> {
        let info = self.info(name)?;
        if info.dims.len() != 2 || info.dims[0] != cols as u64 || info.dims[1] == 0 {
            return Err(ModelError::Shape {
                name: name.to_string(),
                found: info.dims.clone(),
                expected: vec![cols as u64, info.dims.get(1).copied().unwrap_or(0).max(1)],
            });
        }
        self.to_matrix(info)
    }

    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// A vector of `len` elements, decoded to f32 (norm weights, biases, rope factors).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let info = self.info(name)?;
        Self::check_shape(info, &[len as u64])?;
        let m = self.to_matrix(info)?;
        let mut out = vec![0.0f32; len];
        quant::dequantize(m.ty, m.bytes(self.file), &mut out)?;
        Ok(out)
    }

    /// Like [`Binder::vector`] but absent is fine.
    pub fn opt_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        if self.has(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::{SynthSpec, build};

    /// A fused tensor's parts are its row ranges, byte for byte.
    #[test]
    fn fused_phi3_tensors_split_into_row_ranges() {
        let file = gguf::GgufFile::from_bytes(build(&SynthSpec::tiny("phi3")).unwrap()).unwrap();
        let m = crate::Model::from_file(file).unwrap();
        let l = &m.layers[0];
        let qkv = m.file.tensor("blk.0.attn_qkv.weight").unwrap();
        let all = m.file.tensor_data(qkv);
        let rb = l.wq.row_bytes;
        assert_eq!((l.wq.rows, l.wk.rows, l.wv.rows), (64, 32, 32));
        assert_eq!(l.wq.bytes(&m.file), &all[..64 * rb]);
        assert_eq!(l.wk.bytes(&m.file), &all[64 * rb..96 * rb]);
        assert_eq!(l.wv.bytes(&m.file), &all[96 * rb..]);
        let up = m
            .file
            .tensor_data(m.file.tensor("blk.0.ffn_up.weight").unwrap());
        assert_eq!(l.w_gate.bytes(&m.file), &up[..96 * l.w_gate.row_bytes]);
        assert_eq!(l.w_up.bytes(&m.file), &up[96 * l.w_up.row_bytes..]);
        assert_eq!(l.wk.row(&m.file, 31), &all[95 * rb..96 * rb]);
        // A view past the end is empty, not a panic.
        assert!(l.wv.rows_view(40, 8).bytes(&m.file).is_empty());
    }
}
