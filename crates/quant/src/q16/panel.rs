//! [`Panels`]: weight rows decoded for the q16 GEMM ([`gemm_q16`](super::gemm_q16)).
//!
//! Rows are grouped in panels of [`PANEL_ROWS`] (32; the last panel is padded with zero rows). A
//! panel stores its rows' integer quants as i16, interleaved in pairs: for pair `j` (values `2j` and
//! `2j + 1`) the 32 rows' pairs follow each other (64 i16), so one 512-bit load holds one pair of
//! 16 rows, the operand `vpdpwssd` multiplies with one broadcast pair of activations. Next to the
//! quants, per group of values (32, or 16 for Q3_K and Q6_K) the 32 rows' f32 scales, and for the
//! formats with a minimum per block of 32 (Q4_1, Q5_1, Q4_K, Q5_K) the 32 rows' f32 minimum terms.
//!
//! Each row's value `k` is `scale[g] * q[k] + min[b] * x-sum`, the same split as the q16 matvec
//! kernels use (`reference`): the offsets of Q4_0/Q5_0/Q6_K are taken out of the quants here (they
//! become signed), and Q4_K/Q5_K's `-(dmin * m)` is stored as the minimum term.

use gguf::GgmlType;

use super::QK16;
use crate::kquant::QK_K;
use crate::simd::Isa;
use crate::util::f16_to_f32;
use crate::{Op, QuantError, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};

/// Rows per panel.
pub const PANEL_ROWS: usize = 32;

/// Whether [`Panels::decode`] (hence the q16 GEMM) accepts weights of type `ty`.
pub fn supports_gemm(ty: GgmlType) -> bool {
    layout(ty).is_some()
}

/// Values per scale and whether the format has a minimum term, for the supported types.
fn layout(ty: GgmlType) -> Option<(usize, bool)> {
    Some(match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => (32, false),
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => (32, true),
        GgmlType::Q3_K | GgmlType::Q6_K => (16, false),
        _ => return None,
    })
}

/// Decoded weight rows (see the module docs); reused across calls to keep its buffers.
#[derive(Clone, Debug, Default)]
pub struct Panels {
    pub(crate) rows: usize,
    pub(crate) k: usize,
    /// Values per scale: 32 or 16.
    pub(crate) group: usize,
    pub(crate) has_min: bool,
    /// `panels * k * 32` quants.
    pub(crate) q: Vec<i16>,
    /// `panels * (k / group) * 32` scales.
    pub(crate) scale: Vec<f32>,
    /// `panels * (k / 32) * 32` minimum terms, or empty.
    pub(crate) min: Vec<f32>,
    /// One panel's rows of quants (row-major), and one row's scales and minimum terms, before
    /// they are spread into the panel.
    row_q: Vec<i16>,
    row_scale: Vec<f32>,
    row_min: Vec<f32>,
}

impl Panels {
    /// No rows; buffers grow on the first [`decode`](Self::decode).
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of weight rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of panels (`rows` rounded up to [`PANEL_ROWS`]).
    pub fn panels(&self) -> usize {
        self.rows.div_ceil(PANEL_ROWS)
    }

    /// The quants, scales and minimum terms (empty without), in the layout of the module docs.
    pub fn raw(&self) -> (&[i16], &[f32], &[f32]) {
        (&self.q, &self.scale, &self.min)
    }

    /// Decodes the `rows.len() / row_bytes` rows of `ty` in `rows`, each a whole number of blocks
    /// covering exactly `k` values (`k` a multiple of 32). Errors (never panics) on an unsupported
    /// type or inconsistent lengths; the panels are then empty.
    pub fn decode(
        &mut self,
        ty: GgmlType,
        rows: &[u8],
        row_bytes: usize,
        k: usize,
    ) -> Result<(), QuantError> {
        self.decode_with(Isa::best(), ty, rows, row_bytes, k)
    }

    /// [`decode`](Self::decode) with the quants unpacked by code compiled for `isa` (the same result
    /// on every one; [`Isa::Scalar`] runs the formats' own `quants`, the reference). An `isa` this
    /// CPU lacks runs the portable code.
    pub fn decode_with(
        &mut self,
        isa: Isa,
        ty: GgmlType,
        rows: &[u8],
        row_bytes: usize,
        k: usize,
    ) -> Result<(), QuantError> {
        self.rows = 0;
        self.k = 0;
        let op = Op::Dot;
        let (group, has_min) = layout(ty).ok_or(QuantError::Unsupported { ty, op })?;
        let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
        QuantError::check_whole(ty, op, "values", k, bs)?;
        QuantError::check_length(ty, op, "row", "bytes", row_bytes, k / bs * ts)?;
        let m = rows.len().checked_div(row_bytes).unwrap_or(0);
        QuantError::check_length(ty, op, "rows", "bytes", rows.len(), m * row_bytes)?;
        let np = m.div_ceil(PANEL_ROWS);
        let (ng, nb) = (k / group, k / QK16);
        // Every element is overwritten below (padding rows with zeros), so the buffers are only
        // resized: clearing them first would cost a memset of the whole panel set.
        self.q.resize(np * k * PANEL_ROWS, 0);
        self.scale.resize(np * ng * PANEL_ROWS, 0.0);
        self.min
            .resize(if has_min { np * nb * PANEL_ROWS } else { 0 }, 0.0);
        self.row_q.resize(PANEL_ROWS * k, 0);
        self.row_scale.resize(ng, 0.0);
        self.row_min.resize(nb, 0.0);
        let row_bytes = row_bytes.max(1);
        for p in 0..np {
            let valid = PANEL_ROWS.min(m - p * PANEL_ROWS);
            let first = p * PANEL_ROWS * row_bytes;
            let panel_rows = &rows[first..first + valid * row_bytes];
            for (i, row) in panel_rows.chunks_exact(row_bytes).enumerate() {
                let q = &mut self.row_q[i * k..(i + 1) * k];
                let (sc, mn) = (&mut self.row_scale, &mut self.row_min);
                if !super::panel_fast::decode_row(isa, ty, row, q, sc, mn) {
                    decode_row(ty, row, q, sc, mn);
                }
                let s = &mut self.scale[p * ng * PANEL_ROWS..(p + 1) * ng * PANEL_ROWS];
                for (g, &v) in self.row_scale.iter().enumerate() {
                    s[g * PANEL_ROWS + i] = v;
                }
                if has_min {
                    let s = &mut self.min[p * nb * PANEL_ROWS..(p + 1) * nb * PANEL_ROWS];
                    for (b, &v) in self.row_min.iter().enumerate() {
                        s[b * PANEL_ROWS + i] = v;
                    }
                }
            }
            // Padding rows of a partial last panel are zero.
            self.row_q[valid * k..].fill(0);
            if valid < PANEL_ROWS {
                let s = &mut self.scale[p * ng * PANEL_ROWS..(p + 1) * ng * PANEL_ROWS];
                s.chunks_exact_mut(PANEL_ROWS)
                    .for_each(|g| g[valid..].fill(0.0));
                if has_min {
                    let s = &mut self.min[p * nb * PANEL_ROWS..(p + 1) * nb * PANEL_ROWS];
                    s.chunks_exact_mut(PANEL_ROWS)
                        .for_each(|b| b[valid..].fill(0.0));
                }
            }
            let q = &mut self.q[p * k * PANEL_ROWS..(p + 1) * k * PANEL_ROWS];
            super::panel_fast::interleave(isa, &self.row_q, q, k);
        }
        self.rows = m;
        self.k = k;
        self.group = group;
        self.has_min = has_min;
        Ok(())
    }
}

/// One row (whole blocks, lengths checked) into its signed quants, scales and minimum terms,
/// through the formats' `quants` (the reference for `panel_fast`).
fn decode_row(ty: GgmlType, row: &[u8], q: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    macro_rules! small {
        ($m:ident $(, $min:ident)?) => {{
            let (blocks, _) = row.as_chunks::<{ $m::BLOCK_BYTES }>();
            for (b, blk) in blocks.iter().enumerate() {
                let blk = $m::Block::from_bytes(blk);
                for (d, s) in q[QK16 * b..QK16 * (b + 1)].iter_mut().zip(blk.quants()) {
                    *d = i16::from(s);
                }
                scale[b] = f16_to_f32(blk.d);
                $(min[b] = f16_to_f32(blk.$min);)?
            }
        }};
    }
    macro_rules! k_min {
        ($m:ident) => {{
            let (blocks, _) = row.as_chunks::<{ $m::BLOCK_BYTES }>();
            for (sb, blk) in blocks.iter().enumerate() {
                let blk = $m::Block::from_bytes(blk);
                for (d, s) in q[QK_K * sb..QK_K * (sb + 1)].iter_mut().zip(blk.quants()) {
                    *d = i16::from(s);
                }
                for (s, (d, m)) in blk.sub_scales().into_iter().enumerate() {
                    scale[8 * sb + s] = d;
                    min[8 * sb + s] = -m;
                }
            }
        }};
    }
    macro_rules! k16 {
        ($m:ident) => {{
            let (blocks, _) = row.as_chunks::<{ $m::BLOCK_BYTES }>();
            for (sb, blk) in blocks.iter().enumerate() {
                let blk = $m::Block::from_bytes(blk);
                for (d, s) in q[QK_K * sb..QK_K * (sb + 1)].iter_mut().zip(blk.quants()) {
                    *d = i16::from(s);
                }
                scale[16 * sb..16 * (sb + 1)].copy_from_slice(&blk.sub_scales());
            }
        }};
    }
    match ty {
        GgmlType::Q4_0 => small!(q4_0),
        GgmlType::Q5_0 => small!(q5_0),
        GgmlType::Q8_0 => small!(q8_0),
        GgmlType::Q4_1 => small!(q4_1, m),
        GgmlType::Q5_1 => small!(q5_1, m),
        GgmlType::Q4_K => k_min!(q4_k),
        GgmlType::Q5_K => k_min!(q5_k),
        GgmlType::Q3_K => k16!(q3_k),
        GgmlType::Q6_K => k16!(q6_k),
        _ => {}
    }
}
