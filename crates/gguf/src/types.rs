//! ggml tensor element types as stored in GGUF files: ids, block sizes and bytes per block.

use std::fmt;

/// A ggml tensor type. Ids follow ggml.h; retired ids (4, 5, 31..33, 36..38) are not accepted.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// (type, ggml id, elements per block, bytes per block, name)
const TABLE: &[(GgmlType, u32, u64, u64, &str)] = &[
    (GgmlType::F32, 0, 1, 4, "F32"),
    (GgmlType::F16, 1, 1, 2, "F16"),
    (GgmlType::Q4_0, 2, 32, 18, "Q4_0"),
    (GgmlType::Q4_1, 3, 32, 20, "Q4_1"),
    (GgmlType::Q5_0, 6, 32, 22, "Q5_0"),
    (GgmlType::Q5_1, 7, 32, 24, "Q5_1"),
    (GgmlType::Q8_0, 8, 32, 34, "Q8_0"),
    (GgmlType::Q8_1, 9, 32, 36, "Q8_1"),
    (GgmlType::Q2_K, 10, 256, 84, "Q2_K"),
    (GgmlType::Q3_K, 11, 256, 110, "Q3_K"),
    (GgmlType::Q4_K, 12, 256, 144, "Q4_K"),
    (GgmlType::Q5_K, 13, 256, 176, "Q5_K"),
    (GgmlType::Q6_K, 14, 256, 210, "Q6_K"),
    (GgmlType::Q8_K, 15, 256, 292, "Q8_K"),
    (GgmlType::IQ2_XXS, 16, 256, 66, "IQ2_XXS"),
    (GgmlType::IQ2_XS, 17, 256, 74, "IQ2_XS"),
    (GgmlType::IQ3_XXS, 18, 256, 98, "IQ3_XXS"),
    (GgmlType::IQ1_S, 19, 256, 50, "IQ1_S"),
    (GgmlType::IQ4_NL, 20, 32, 18, "IQ4_NL"),
    (GgmlType::IQ3_S, 21, 256, 110, "IQ3_S"),
    (GgmlType::IQ2_S, 22, 256, 82, "IQ2_S"),
    (GgmlType::IQ4_XS, 23, 256, 136, "IQ4_XS"),
    (GgmlType::I8, 24, 1, 1, "I8"),
    (GgmlType::I16, 25, 1, 2, "I16"),
    (GgmlType::I32, 26, 1, 4, "I32"),
    (GgmlType::I64, 27, 1, 8, "I64"),
    (GgmlType::F64, 28, 1, 8, "F64"),
    (GgmlType::IQ1_M, 29, 256, 56, "IQ1_M"),
    (GgmlType::BF16, 30, 1, 2, "BF16"),
    (GgmlType::TQ1_0, 34, 256, 54, "TQ1_0"),
    (GgmlType::TQ2_0, 35, 256, 66, "TQ2_0"),
    (GgmlType::MXFP4, 39, 32, 17, "MXFP4"),
];

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, u64, u64, &'static str) {
        // Every variant has exactly one row; the table test below guarantees it.
        TABLE.iter().find(|r| r.0 == self).unwrap_or(&TABLE[0])
    }

    /// The type for a ggml id, or `None` for an unknown or retired id.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The type named as llama.cpp names it ("Q4_K", "f16", case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.4.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    /// The ggml type id stored in GGUF tensor infos.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Elements per block (1 for plain types, 32 or 256 for block formats).
    pub fn block_size(self) -> u64 {
        self.row().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().3
    }

    /// The name llama.cpp uses: `F32`, `Q4_K`, ...
    pub fn name(self) -> &'static str {
        self.row().4
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips() {
        for r in TABLE {
            assert_eq!(GgmlType::from_id(r.1), Some(r.0));
            assert_eq!(r.0.id(), r.1);
            assert_eq!(GgmlType::from_name(r.4), Some(r.0));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(31), None);
        assert_eq!(GgmlType::Q4_K.bytes_for(576), None);
        assert_eq!(GgmlType::Q4_1.bytes_for(576), Some(18 * 20));
    }
}
