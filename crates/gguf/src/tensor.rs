//! Tensor directory entries: [`TensorInfo`] (read from a file) and [`TensorSpec`] (given to the
//! writer), and the shape rules both obey.

use crate::types::GgmlType;
use std::fmt;

/// Most dimensions a ggml tensor has.
pub const MAX_DIMS: usize = 4;

/// One entry of a file's tensor directory. Everything in it was validated when the file was opened.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the row length (fastest varying). 1 to 4 entries, each >= 1.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section ([`crate::GgufFile::data_offset`]).
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dimensions).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }

    /// Elements per row: `dims[0]`.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of `dims[1..]` (1 for a vector).
    pub fn n_rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .fold(1u64, |a, &d| a.saturating_mul(d))
    }

    /// Bytes per row (a row is always a whole number of blocks).
    pub fn row_bytes(&self) -> u64 {
        self.ty.bytes_for(self.row_len()).unwrap_or(0)
    }
}

impl fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?} ({} bytes at data offset {})",
            self.name, self.ty, self.dims, self.n_bytes, self.offset
        )
    }
}

/// A tensor to be written by [`crate::GgufWriter`]: its name, dimensions (ggml order) and type.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// Tensor name; unique within the file.
    pub name: String,
    /// Dimensions in ggml order (`dims[0]` = row length).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
}

impl TensorSpec {
    /// A spec from its parts.
    pub fn new(name: impl Into<String>, dims: impl Into<Vec<u64>>, ty: GgmlType) -> Self {
        TensorSpec {
            name: name.into(),
            dims: dims.into(),
            ty,
        }
    }

    /// Bytes of data this tensor takes, or `None` if the shape is not valid for the type.
    pub fn n_bytes(&self) -> Option<u64> {
        shape_bytes(&self.dims, self.ty).ok()
    }
}

/// Checks a shape against ggml's rules and returns the data size in bytes: 1 to 4 dimensions,
/// each >= 1, an element count that fits in an i64, and rows that are whole blocks.
pub(crate) fn shape_bytes(dims: &[u64], ty: GgmlType) -> Result<u64, String> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(format!("n_dims {} is not in 1..={MAX_DIMS}", dims.len()));
    }
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(format!("dims[{i}] is 0 (dims {dims:?})"));
    }
    let n = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("element count of dims {dims:?} overflows i64"))?;
    let row = dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(ty.block_size()) {
        return Err(format!(
            "row length dims[0] = {row} is not a multiple of the {ty} block size {}",
            ty.block_size()
        ));
    }
    ty.bytes_for(n)
        .ok_or_else(|| format!("size of {n} {ty} elements overflows u64"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(shape_bytes(&[3], GgmlType::F32), Ok(12));
        assert_eq!(shape_bytes(&[64, 3], GgmlType::Q4_0), Ok(6 * 18));
        assert_eq!(shape_bytes(&[256, 2], GgmlType::Q4_K), Ok(2 * 144));
        assert!(shape_bytes(&[], GgmlType::F32).is_err());
        assert!(shape_bytes(&[1, 1, 1, 1, 1], GgmlType::F32).is_err());
        assert!(shape_bytes(&[4, 0], GgmlType::F32).is_err());
        assert!(shape_bytes(&[16, 2], GgmlType::Q4_0).is_err());
        assert!(shape_bytes(&[1 << 32, 1 << 32], GgmlType::F32).is_err());
        assert!(shape_bytes(&[1 << 62], GgmlType::F64).is_err());
    }

    #[test]
    fn info_helpers() {
        let t = TensorInfo {
            name: "w".into(),
            dims: vec![256, 3, 2],
            ty: GgmlType::Q4_K,
            offset: 0,
            n_bytes: 864,
        };
        assert_eq!(t.n_elements(), 1536);
        assert_eq!(t.row_len(), 256);
        assert_eq!(t.n_rows(), 6);
        assert_eq!(t.row_bytes(), 144);
        assert_eq!(
            t.to_string(),
            "w Q4_K [256, 3, 2] (864 bytes at data offset 0)"
        );
        assert_eq!(
            TensorSpec::new("x", [32, 2], GgmlType::Q8_0).n_bytes(),
            Some(68)
        );
    }
}
