//! Weights on the device. Matrices keep their GGUF block layout (no repack), except that Q6_K
//! blocks are padded from 210 to 224 bytes so that the kernels read them with aligned vector
//! loads (`MOLLA_KDEFS=Q6FILE` keeps the file's blocks, for comparison); vectors (norms, biases)
//! are f32.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch::WeightRef;
use cudarc::driver::CudaSlice;
use gguf::GgmlType;

/// Whether the kernels decode weights of type `ty` (kernels/dequant.cuh): F32, F16, BF16, Q4_0,
/// Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K..Q6_K, the types the CPU reference supports.
pub fn supports(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
    )
}

/// A weight matrix uploaded in its file encoding.
pub(crate) struct DevMatrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    pub buf: CudaSlice<u8>,
}

impl DevMatrix {
    /// Uploads `rows` rows of `cols` elements of `ty` held in `bytes`.
    pub fn upload(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<DevMatrix> {
        if !supports(ty) {
            return Err(CudaError::UnsupportedType {
                name: name.to_string(),
                ty,
            });
        }
        let row_bytes = ty
            .bytes_for(cols as u64)
            .and_then(|b| usize::try_from(b).ok())
            .filter(|_| cols.is_multiple_of(8) && cols > 0)
            .ok_or_else(|| CudaError::Unsupported(format!("tensor '{name}': {cols} columns of {ty} (need a multiple of 8 and whole blocks)")))?;
        if i32::try_from(row_bytes).is_err() || i32::try_from(rows).is_err() {
            return Err(CudaError::Unsupported(format!(
                "tensor '{name}' is too large"
            )));
        }
        let expected = rows.saturating_mul(row_bytes);
        if bytes.len() != expected {
            return Err(CudaError::Length {
                what: "weight bytes",
                got: bytes.len(),
                expected,
            });
        }
        let padded;
        let (bytes, row_bytes) = if gpu.q6pad && ty == GgmlType::Q6_K {
            padded = pad_q6k(bytes);
            (&padded[..], row_bytes / q6k_file_bytes() * Q6K_PADDED)
        } else if let Some(size) = legacy_padded(ty).filter(|_| gpu.legpad) {
            padded = pad_legacy(ty, size, bytes);
            (&padded[..], row_bytes / ty.type_size() as usize * size)
        } else {
            (bytes, row_bytes)
        };
        // 16 bytes of slack: the persistent decode kernel copies rows in whole 16-byte units.
        let mut buf = gpu.zeros(bytes.len() + 16)?;
        gpu.write(bytes, &mut buf)?;
        Ok(DevMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            buf,
        })
    }

    /// Binds a model matrix.
    pub fn from_model(gpu: &Gpu, file: &gguf::GgufFile, m: &model::Matrix) -> Result<DevMatrix> {
        DevMatrix::upload(gpu, &m.name, m.ty, m.rows, m.cols, m.bytes(file))
    }

    /// The matrix as kernel arguments.
    pub fn r(&self, gpu: &Gpu) -> WeightRef {
        WeightRef {
            ptr: gpu.ptr(&self.buf),
            ty: self.ty.id() as i32,
            rows: self.rows,
            cols: self.cols,
            row_bytes: self.row_bytes,
        }
    }
}

/// Bytes of a padded Q6_K block on the device (kernels/common.cuh `Q6K_BYTES`); in the file,
/// `GgmlType::Q6_K.type_size()`.
const Q6K_PADDED: usize = 224;

fn q6k_file_bytes() -> usize {
    GgmlType::Q6_K.type_size() as usize
}

/// Q6_K blocks copied into 224-byte slots (zero padding after each).
fn pad_q6k(bytes: &[u8]) -> Vec<u8> {
    let file = q6k_file_bytes();
    let mut out = vec![0u8; bytes.len() / file * Q6K_PADDED];
    for (src, dst) in bytes
        .chunks_exact(file)
        .zip(out.chunks_exact_mut(Q6K_PADDED))
    {
        dst[..file].copy_from_slice(src);
    }
    out
}

/// The bytes of a block of `ty` padded on the device (`Gpu::legpad`, kernels/common.cuh
/// `LEGPAD`): Q8_0 36, Q4_0 20, Q5_0 24; None for other types.
pub(crate) fn legacy_padded(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q8_0 => Some(36),
        GgmlType::Q4_0 => Some(20),
        GgmlType::Q5_0 => Some(24),
        _ => None,
    }
}

/// Blocks of `ty` (Q8_0, Q4_0 or Q5_0) padded to `size` bytes ([`legacy_padded`]): the f16
/// scale d as an f32 (exact) in the first word, then the block's other bytes (Q5_0's qh, then
/// the quants), so that every field starts 4-byte aligned. Q5_0's qh is stored permuted
/// ([`permute_qh`]).
fn pad_legacy(ty: GgmlType, size: usize, bytes: &[u8]) -> Vec<u8> {
    let file = ty.type_size() as usize;
    let mut out = vec![0u8; bytes.len() / file * size];
    for (src, dst) in bytes.chunks_exact(file).zip(out.chunks_exact_mut(size)) {
        let d = half::f16::from_le_bytes([src[0], src[1]]).to_f32();
        dst[..4].copy_from_slice(&d.to_le_bytes());
        dst[4..4 + file - 2].copy_from_slice(&src[2..]);
        if ty == GgmlType::Q5_0 {
            let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
            dst[4..8].copy_from_slice(&permute_qh(qh).to_le_bytes());
        }
    }
    out
}

/// Q5_0's fifth bits (bit q for quant q) as the padded kernels read them (kernels/q16.cuh
/// `pad_quant_words`): bit 8 (q % 4) + q / 4, so that the four quants of a 32-bit word of bytes
/// (4k .. 4k + 4) have theirs at bit k of each byte.
fn permute_qh(qh: u32) -> u32 {
    (0..32).fold(0, |acc, q| acc | ((qh >> q) & 1) << (8 * (q % 4) + q / 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEGPAD's blocks: the f32 scale equals the f16 one, the rest follows unchanged.
    #[test]
    fn legacy_padding_keeps_every_field() {
        for (ty, file, size) in [
            (GgmlType::Q8_0, 34, 36),
            (GgmlType::Q4_0, 18, 20),
            (GgmlType::Q5_0, 22, 24),
        ] {
            assert_eq!(ty.type_size() as usize, file);
            assert_eq!(legacy_padded(ty), Some(size));
            let mut bytes: Vec<u8> = (0..3 * file).map(|i| (i * 7 % 251) as u8).collect();
            // Scales 1.5, -0.25 and a subnormal.
            for (b, d) in [0x3e00u16, 0xb400, 0x0003].iter().enumerate() {
                bytes[b * file..b * file + 2].copy_from_slice(&d.to_le_bytes());
            }
            let p = pad_legacy(ty, size, &bytes);
            assert_eq!(p.len(), 3 * size);
            for b in 0..3 {
                let (src, dst) = (
                    &bytes[b * file..(b + 1) * file],
                    &p[b * size..(b + 1) * size],
                );
                let d = f32::from_le_bytes(dst[..4].try_into().unwrap());
                let h = half::f16::from_le_bytes([src[0], src[1]]);
                assert_eq!(d, h.to_f32(), "{ty} block {b}");
                let rest = if ty == GgmlType::Q5_0 { 6 } else { 2 };
                assert_eq!(
                    &dst[4 + rest - 2..4 + file - 2],
                    &src[rest..],
                    "{ty} block {b}"
                );
                if ty == GgmlType::Q5_0 {
                    let (qh, p) = (&src[2..6], &dst[4..8]);
                    for q in 0..32 {
                        let (s, t) = (q, 8 * (q % 4) + q / 4);
                        assert_eq!(qh[s / 8] >> (s % 8) & 1, p[t / 8] >> (t % 8) & 1, "bit {q}");
                    }
                }
            }
        }
        assert_eq!(legacy_padded(GgmlType::Q4_1), None);
    }

    #[test]
    fn q6k_padding_keeps_every_block_at_its_slot() {
        const Q6K_FILE: usize = 210;
        assert_eq!(q6k_file_bytes(), Q6K_FILE);
        let bytes: Vec<u8> = (0..3 * Q6K_FILE).map(|i| (i % 251) as u8).collect();
        let p = pad_q6k(&bytes);
        assert_eq!(p.len(), 3 * Q6K_PADDED);
        for b in 0..3 {
            assert_eq!(
                &p[b * Q6K_PADDED..b * Q6K_PADDED + Q6K_FILE],
                &bytes[b * Q6K_FILE..(b + 1) * Q6K_FILE]
            );
            assert!(
                p[b * Q6K_PADDED + Q6K_FILE..(b + 1) * Q6K_PADDED]
                    .iter()
                    .all(|&x| x == 0)
            );
        }
    }
}
