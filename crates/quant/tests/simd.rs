//! The runtime-dispatched f32 helpers, `matvec_f32` and `dequantize_fast` against their scalar twins,
//! on every instruction set this CPU has.

use gguf::GgmlType;
use quant::q16::{matvec_f32, matvec_f32_with};
use quant::simd::{
    Isa, axpy_f32, axpy_f32_scalar, dequantize_fast, dequantize_fast_with, dot_f32, dot_f32_scalar,
};

mod common;

use common::{Rng, dot_f64};

const LENGTHS: &[usize] = &[0, 1, 7, 8, 9, 31, 32, 33, 100, 576, 1003, 4864];

#[test]
fn dot_matches_f64() {
    let mut rng = Rng(1);
    for &n in LENGTHS {
        let (a, b) = (rng.uniforms(n), rng.uniforms(n));
        let (exact, scale) = dot_f64(&a, &b);
        for got in [dot_f32(&a, &b), dot_f32_scalar(&a, &b)] {
            assert!(
                (got as f64 - exact).abs() <= 1e-6 * scale.max(1e-30),
                "n={n}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn dot_rejects_mismatched_lengths() {
    dot_f32(&[1.0; 3], &[1.0; 4]);
}

#[test]
fn axpy_matches_scalar() {
    let mut rng = Rng(2);
    for &n in LENGTHS {
        let (x, y0) = (rng.uniforms(n), rng.uniforms(n));
        let a = rng.uniform() * 3.0;
        let (mut y1, mut y2) = (y0.clone(), y0.clone());
        axpy_f32(&mut y1, a, &x);
        axpy_f32_scalar(&mut y2, a, &x);
        for i in 0..n {
            let tol = 2.0 * f32::EPSILON * ((a * x[i]).abs() + y0[i].abs());
            assert!((y1[i] - y2[i]).abs() <= tol, "n={n} i={i}");
        }
    }
}

#[test]
fn dequantize_fast_is_bit_exact() {
    let mut rng = Rng(3);
    let types: Vec<GgmlType> = (0..64)
        .filter_map(GgmlType::from_id)
        .filter(|&t| quant::supports_dequantize(t))
        .collect();
    assert!(types.len() >= 13);
    for ty in types {
        let ts = ty.type_size() as usize;
        for blocks in [0, 1, 3, 17] {
            let mut src = common::random_blocks(&mut rng, ty, blocks * ts, |_| 2.0);
            if matches!(ty, GgmlType::F32) {
                // Keep f32 weights finite so NaN payloads do not enter the comparison.
                for w in src.chunks_exact_mut(4) {
                    w.copy_from_slice(&rng.uniform().to_le_bytes());
                }
            }
            let n = blocks * ty.block_size() as usize;
            let mut want = vec![0.0f32; n];
            quant::dequantize(ty, &src, &mut want).unwrap();
            for isa in Isa::available() {
                let mut got = vec![1.0f32; n];
                dequantize_fast_with(isa, ty, &src, &mut got).unwrap();
                for i in 0..n {
                    let same = got[i].to_bits() == want[i].to_bits()
                        || (got[i].is_nan() && want[i].is_nan());
                    assert!(same, "{ty} {isa:?} element {i}: {} vs {}", got[i], want[i]);
                }
            }
        }
        // Length errors, not panics.
        if ts > 1 {
            assert!(dequantize_fast(ty, &vec![0u8; ts + 1], &mut vec![0.0; 64]).is_err());
        }
        let n = ty.block_size() as usize;
        assert!(dequantize_fast(ty, &vec![0u8; ts], &mut vec![0.0; n + 1]).is_err());
    }
}

#[test]
fn matvec_f32_matches_f64() {
    let mut rng = Rng(4);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let ts = ty.type_size() as usize;
        for n in [1usize, 7, 8, 33, 576, 1003] {
            let m = 7;
            let w = rng.uniforms(m * n);
            let mut rows = vec![0u8; m * n * ts];
            quant::quantize(ty, &w, &mut rows).unwrap();
            let mut wf = vec![0.0f32; m * n];
            quant::dequantize(ty, &rows, &mut wf).unwrap();
            let x = rng.uniforms(n);
            for isa in Isa::available() {
                let mut y = vec![f32::NAN; m];
                matvec_f32_with(isa, ty, &rows, n * ts, &x, &mut y).unwrap();
                for r in 0..m {
                    let wr = &wf[r * n..(r + 1) * n];
                    let (exact, scale) = dot_f64(wr, &x);
                    assert!(
                        (y[r] as f64 - exact).abs() <= 1e-6 * scale,
                        "{ty} {isa:?} n={n} row {r}: {} vs {exact}",
                        y[r]
                    );
                }
            }
        }
        let mut y = [0.0f32; 2];
        assert!(matvec_f32(ty, &vec![0u8; 2 * 4 * ts], 4 * ts, &[1.0; 3], &mut y).is_err());
        assert!(matvec_f32(ty, &vec![0u8; 3 * 4 * ts], 4 * ts, &[1.0; 4], &mut y).is_err());
    }
    assert!(matvec_f32(GgmlType::Q8_0, &[0u8; 34], 34, &[0.0; 32], &mut [0.0]).is_err());
}

#[test]
fn isa_detection() {
    let isas = Isa::available();
    println!("available: {isas:?}, best: {:?}", Isa::best());
    assert_eq!(isas[0], Isa::Scalar);
    assert_eq!(Some(&Isa::best()), isas.last());
    #[cfg(target_arch = "aarch64")]
    assert!(isas.contains(&Isa::Neon));
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        assert!(isas.contains(&Isa::Avx2));
    }
}

#[test]
fn exp_is_within_two_ulp_of_f64() {
    let mut worst = 0.0f64;
    let mut x = -87.0f32;
    while x < 88.0 {
        let e = quant::simd::exp_scalar(x) as f64;
        let want = (x as f64).exp();
        worst = worst.max((e - want).abs() / want);
        x += 0.00731;
    }
    assert!(worst < 2.5e-7, "exp relative error {worst:e}");
    assert_eq!(quant::simd::exp_scalar(0.0), 1.0);
    // Clamped: tiny but normal below the range, finite above it.
    assert!(quant::simd::exp_scalar(-1e4) > 0.0 && quant::simd::exp_scalar(-1e4) < 1.3e-38);
    assert!(quant::simd::exp_scalar(1e4).is_finite());
}

/// GeGLU's kernels give its scalar twin's bits, close to GELU's tanh form in f64 (as a sigmoid).
#[test]
fn geglu_matches_scalar_and_the_tanh_form() {
    let mut rng = Rng(10);
    for n in [1, 7, 37, 513, 640, 2048] {
        let mut x: Vec<f32> = rng.normals(n).iter().map(|v| v * 6.0).collect();
        if n > 4 {
            x[..4].copy_from_slice(&[-90.0, 90.0, 0.0, -1e-30]);
        }
        let u = rng.normals(n);
        let mut h = x.clone();
        quant::simd::geglu_scalar(&mut h, &u);
        for isa in Isa::available() {
            let mut g = x.clone();
            quant::simd::geglu_with(isa, &mut g, &u);
            let same = g.iter().zip(&h).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{isa:?} n={n}");
        }
        for ((&y, &x), &u) in h.iter().zip(&x).zip(&u) {
            let x = f64::from(x);
            // 0.5 (1 + tanh(t)) = 1 / (1 + e^(-2t)), without tanh's cancellation near -1.
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let t = c * (x + 0.044715 * x * x * x);
            let want = x / (1.0 + (-2.0 * t).exp()) * f64::from(u);
            // The exponent's f32 rounding (a few ulps of |2t|) carries into e^(-2t).
            let tol = 2e-6 + 4e-7 * (2.0 * t).abs();
            assert!(
                (f64::from(y) - want).abs() <= tol * want.abs() + 1e-30,
                "{x} {u}: {y} vs {want}"
            );
        }
    }
}

#[test]
fn softmax_exp_and_swiglu_match_scalar() {
    let mut rng = Rng(9);
    for n in [1, 7, 37, 513, 576, 896, 1536, 4864] {
        let x: Vec<f32> = rng.normals(n).iter().map(|v| v * 8.0).collect();
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let u = rng.normals(n);
        let mut b = x.clone();
        let sb = quant::simd::softmax_exp_scalar(&mut b, max);
        let mut h = x.clone();
        quant::simd::swiglu_scalar(&mut h, &u);
        for isa in Isa::available() {
            let mut a = x.clone();
            let sa = quant::simd::softmax_exp_with(isa, &mut a, max);
            let same = a.iter().zip(&b).all(|(u, v)| u.to_bits() == v.to_bits());
            assert!(same, "{isa:?} n={n}");
            // Sums in a different order: both within f32 summation error of the exact sum.
            let exact: f64 = b.iter().map(|&v| v as f64).sum();
            for s in [sa, sb] {
                assert!(
                    (s as f64 - exact).abs() <= 2e-5 * exact,
                    "{isa:?} n={n}: {s}"
                );
            }
            let mut g = x.clone();
            quant::simd::swiglu_with(isa, &mut g, &u);
            let same = g.iter().zip(&h).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{isa:?} n={n}");
        }
        for ((&y, &x), &u) in h.iter().zip(&x).zip(&u) {
            let want = x as f64 / (1.0 + (-x as f64).exp()) * u as f64;
            assert!(
                (y as f64 - want).abs() <= 1e-6 * want.abs() + 1e-30,
                "{x} {u}"
            );
        }
    }
}
