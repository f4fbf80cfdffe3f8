//! Pure-Rust checks: dot against dequantize, quantize round-trip error, layout packing inverses, and
//! that the dispatch API errors instead of panicking. Bit-exactness against the Python `gguf` package is
//! in `tests/python_reference.rs`.

use gguf::GgmlType;

use crate::{Op, QuantError, dequantize, dot, quantize, supports_dequantize, supports_quantize};

#[path = "../tests/common/mod.rs"]
mod common;

use common::{Rng, dot_f64};

/// Every type the crate can dequantize (ids 0..64).
fn dequant_types() -> Vec<GgmlType> {
    (0..64)
        .filter_map(GgmlType::from_id)
        .filter(|&t| supports_dequantize(t))
        .collect()
}

/// Every type the crate can quantize.
fn quant_types() -> Vec<GgmlType> {
    (0..64)
        .filter_map(GgmlType::from_id)
        .filter(|&t| supports_quantize(t))
        .collect()
}

/// Row widths to test for `ty`: the model widths from the brief, K-quants at multiples of 256.
fn widths(ty: GgmlType) -> &'static [usize] {
    if ty.block_size() == 256 {
        &[256, 1536, 4608]
    } else {
        &[576, 896, 1536, 4864]
    }
}

/// Random blocks: random bytes with every f16 scale replaced by a finite value in ±2 (the f16 fields
/// sit at the offsets listed per type; plain float types get random finite values).
fn random_row(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    let n_bytes = ty.bytes_for(n as u64).unwrap() as usize;
    if common::f16_fields(ty).is_empty() {
        let values = rng.normals(n);
        let mut out = vec![0u8; n_bytes];
        quantize(ty, &values, &mut out).unwrap();
        return out;
    }
    common::random_blocks(rng, ty, n_bytes, |_| 2.0)
}

/// Checks `dot` against an f64 dot of the dequantized row, relative to Σ|w·x|.
fn check_dot(ty: GgmlType, row: &[u8], x: &[f32], what: &str) {
    let mut w = vec![0f32; x.len()];
    dequantize(ty, row, &mut w).unwrap();
    let (want, scale) = dot_f64(&w, x);
    let got = f64::from(dot(ty, row, x).unwrap());
    assert!(
        (got - want).abs() <= 1e-5 * scale + 1e-30,
        "{ty} {what} width {}: dot {got} vs dequantize·x {want} (Σ|w·x| = {scale})",
        x.len()
    );
}

#[test]
fn dot_matches_dequantize() {
    let mut rng = Rng(1);
    for ty in dequant_types() {
        for &n in widths(ty) {
            let x = rng.normals(n);
            let row = random_row(&mut rng, ty, n);
            check_dot(ty, &row, &x, "random blocks");
            if supports_quantize(ty) {
                let mut q = vec![0u8; row.len()];
                quantize(ty, &rng.normals(n), &mut q).unwrap();
                check_dot(ty, &q, &x, "quantized row");
            }
        }
    }
}

/// RMS error of quantize → dequantize relative to the RMS of the data.
fn relative_rmse(ty: GgmlType, x: &[f32]) -> f64 {
    let mut q = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize(ty, x, &mut q).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize(ty, &q, &mut y).unwrap();
    let err: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let rms: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    (err / rms).sqrt()
}

/// Upper bound on the relative RMSE of normal data for `ty`, from its bit depth (measured values are
/// about 20-30% lower).
fn rmse_bound(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 3e-4,
        GgmlType::BF16 => 2.5e-3,
        GgmlType::Q8_0 => 0.0075,
        GgmlType::Q6_K => 0.022,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 0.05,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 0.1,
        GgmlType::Q3_K => 0.2,
        GgmlType::Q2_K => 0.35,
        other => panic!("no error bound for {other}"),
    }
}

#[test]
fn round_trip_error_fits_bit_depth() {
    let mut rng = Rng(2);
    for ty in quant_types() {
        for &n in widths(ty) {
            let x = rng.normals(n);
            let e = relative_rmse(ty, &x);
            assert!(
                e <= rmse_bound(ty),
                "{ty} width {n}: relative RMSE {e:.5} > {}",
                rmse_bound(ty)
            );
            // Scale invariance: tiny and large rows quantize about as well.
            for s in [0.02f32, 100.0] {
                let xs: Vec<f32> = x.iter().map(|v| v * s).collect();
                let e = relative_rmse(ty, &xs);
                assert!(
                    e <= rmse_bound(ty) * 1.1,
                    "{ty} width {n} scaled {s}: relative RMSE {e:.5}"
                );
            }
        }
    }
}

/// llama.cpp's test-quantize-fns criterion: data `0.1 + 2 cos(i)` of 4096 values, error measured as
/// `sqrt(Σ diff²) / n`, below 0.002 (0.004 for 3-bit, 0.0075 for 2-bit types).
#[test]
fn round_trip_passes_llama_cpp_criterion() {
    let n = 4096;
    let x: Vec<f32> = (0..n).map(|i| 0.1 + 2.0 * (i as f32).cos()).collect();
    for ty in quant_types() {
        let bound = match ty {
            GgmlType::Q2_K => 0.0075,
            GgmlType::Q3_K => 0.004,
            _ => 0.002,
        };
        let mut q = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
        quantize(ty, &x, &mut q).unwrap();
        let mut y = vec![0f32; n];
        dequantize(ty, &q, &mut y).unwrap();
        let sum: f64 = x
            .iter()
            .zip(&y)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
            .sum();
        let err = sum.sqrt() / n as f64;
        assert!(err < bound, "{ty}: total error {err:.6} >= {bound}");
    }
}

#[test]
fn quantize_special_rows() {
    let mut rng = Rng(3);
    for ty in quant_types() {
        let n = 512;
        let bytes = ty.bytes_for(n as u64).unwrap() as usize;
        let (mut q, mut y) = (vec![0u8; bytes], vec![0f32; n]);
        // All zeros decode to zeros.
        quantize(ty, &vec![0.0; n], &mut q).unwrap();
        dequantize(ty, &q, &mut y).unwrap();
        assert!(
            y.iter().all(|&v| v == 0.0),
            "{ty}: zeros round-trip to {y:?}"
        );
        // Constant rows decode close to the constant.
        for c in [1.5f32, -0.75] {
            quantize(ty, &vec![c; n], &mut q).unwrap();
            dequantize(ty, &q, &mut y).unwrap();
            assert!(
                y.iter().all(|&v| (v - c).abs() <= 0.07 * c.abs()),
                "{ty}: constant {c}: {y:?}"
            );
        }
        // A single outlier survives (it sets its block's scale).
        let mut x: Vec<f32> = (0..n).map(|_| 0.01 * rng.normal()).collect();
        x[100] = -25.0;
        quantize(ty, &x, &mut q).unwrap();
        dequantize(ty, &q, &mut y).unwrap();
        assert!(
            (y[100] + 25.0).abs() < 0.2,
            "{ty}: outlier -25 became {}",
            y[100]
        );
        // Non-finite and extreme inputs must not panic.
        let mut x = rng.normals(n);
        x[3] = f32::NAN;
        x[40] = f32::INFINITY;
        x[300] = f32::NEG_INFINITY;
        x[301] = f32::MAX;
        x[302] = f32::MIN_POSITIVE / 4.0;
        quantize(ty, &x, &mut q).unwrap();
        dequantize(ty, &q, &mut y).unwrap();
    }
}

#[test]
fn rows_at_odd_offsets_decode_the_same() {
    let mut rng = Rng(4);
    for ty in dequant_types() {
        let n = widths(ty)[0];
        let row = random_row(&mut rng, ty, n);
        let mut shifted = vec![0u8; row.len() + 3];
        shifted[3..].copy_from_slice(&row);
        let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
        dequantize(ty, &row, &mut a).unwrap();
        dequantize(ty, &shifted[3..], &mut b).unwrap();
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn k_quant_layouts_invert() {
    let mut rng = Rng(5);
    for _ in 0..20 {
        let mut byte = || rng.next_u64() as u8;
        let (ls, lm): ([u8; 8], [u8; 8]) = (
            std::array::from_fn(|_| byte() & 63),
            std::array::from_fn(|_| byte() & 63),
        );
        let packed = crate::kquant::pack_scale_mins(&ls, &lm);
        assert!((0..8).all(|j| crate::kquant::scale_min(j, &packed) == (ls[j], lm[j])));
        let q: [u8; 256] = std::array::from_fn(|_| byte() & 63);

        let mut b4 = crate::q4_k::Block {
            d: [0; 2],
            dmin: [0; 2],
            scales: [0; 12],
            qs: [0; 128],
        };
        b4.qs = crate::q4_k::Block::pack_quants(&q.map(|v| v & 15));
        assert_eq!(b4.quants(), q.map(|v| v & 15));
        let mut b5 = crate::q5_k::Block {
            d: [0; 2],
            dmin: [0; 2],
            scales: [0; 12],
            qh: [0; 32],
            qs: [0; 128],
        };
        (b5.qh, b5.qs) = crate::q5_k::Block::pack_quants(&q.map(|v| v & 31));
        assert_eq!(b5.quants(), q.map(|v| v & 31));
        let mut b6 = crate::q6_k::Block {
            ql: [0; 128],
            qh: [0; 64],
            scales: [0; 16],
            d: [0; 2],
        };
        (b6.ql, b6.qh) = crate::q6_k::Block::pack_quants(&q);
        assert_eq!(b6.quants(), q.map(|v| v as i8 - 32));
        let mut b3 = crate::q3_k::Block {
            hmask: [0; 32],
            qs: [0; 64],
            scales: [0; 12],
            d: [0; 2],
        };
        let sc: [u8; 16] = std::array::from_fn(|j| q[j]);
        b3.scales = crate::q3_k::Block::pack_scales(&sc);
        assert_eq!(b3.scales(), sc.map(|v| v as i8 - 32));
    }
}

/// The variant and operation of the error `r` must hold.
fn error_of<T: std::fmt::Debug>(r: Result<T, QuantError>) -> (&'static str, Op) {
    let err = r.expect_err("expected an error");
    assert!(!err.to_string().contains('\n'), "{err}");
    match err {
        QuantError::Unsupported { op, .. } => ("unsupported", op),
        QuantError::NotWholeBlocks { op, .. } => ("blocks", op),
        QuantError::Length { op, .. } => ("length", op),
    }
}

#[test]
fn wrong_lengths_are_errors() {
    use Op::{Dequantize, Dot, Quantize};
    for ty in dequant_types() {
        let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
        let src = vec![0u8; 2 * ts];
        let mut dst = vec![0f32; 2 * bs + 1];
        let err = dequantize(ty, &src, &mut dst).unwrap_err();
        let (what, unit, got, expected) = ("destination", "values", 2 * bs + 1, 2 * bs);
        assert_eq!(
            err,
            QuantError::Length {
                ty,
                op: Dequantize,
                what,
                unit,
                got,
                expected
            }
        );
        assert_eq!(
            error_of(dequantize(ty, &src, &mut dst[..2 * bs - 1])),
            ("length", Dequantize)
        );
        assert_eq!(error_of(dot(ty, &src, &dst)), ("length", Dot));
        if ts > 1 {
            assert_eq!(
                error_of(dequantize(ty, &src[..ts + 1], &mut dst[..bs])),
                ("blocks", Dequantize)
            );
            assert_eq!(error_of(dot(ty, &src[1..], &dst[..bs])), ("blocks", Dot));
        }
        // Empty input is fine.
        dequantize(ty, &[], &mut []).unwrap();
        assert_eq!(dot(ty, &[], &[]).unwrap(), 0.0);
    }
    for ty in quant_types() {
        let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
        let src = vec![0f32; 2 * bs];
        assert_eq!(
            error_of(quantize(ty, &src, &mut vec![0u8; 2 * ts - 1])),
            ("length", Quantize)
        );
        if bs > 1 {
            assert_eq!(
                error_of(quantize(ty, &src[1..], &mut vec![0u8; 2 * ts])),
                ("blocks", Quantize)
            );
        }
        quantize(ty, &[], &mut []).unwrap();
    }
}

#[test]
fn unsupported_types_are_errors() {
    let all: Vec<GgmlType> = (0..64).filter_map(GgmlType::from_id).collect();
    let unsupported: Vec<GgmlType> = all
        .into_iter()
        .filter(|&t| !supports_dequantize(t))
        .collect();
    assert!(unsupported.contains(&GgmlType::IQ2_XXS) && unsupported.contains(&GgmlType::I32));
    for ty in unsupported {
        assert!(!supports_quantize(ty));
        let err = dequantize(ty, &[0; 4], &mut [0.0; 4]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("dequantize is not supported for {ty}")
        );
        assert_eq!(error_of(dot(ty, &[], &[])), ("unsupported", Op::Dot));
        assert_eq!(
            error_of(quantize(ty, &[], &mut [])),
            ("unsupported", Op::Quantize)
        );
    }
    // Everything common GGUF files hold is covered, both ways.
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        assert!(supports_dequantize(ty) && supports_quantize(ty), "{ty}");
    }
}
