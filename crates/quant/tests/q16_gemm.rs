//! The q16 GEMM: every instruction set this CPU has against the scalar tile (bit for bit), and the
//! GEMM against the q16 matvec reference `reference::dot_q16` token by token; parallel quantization
//! against the serial one.

use gguf::GgmlType;
use quant::QuantError;
use quant::q16::{Panels, Q16Acts, gemm_q16, gemm_q16_with, reference, supports_gemm};
use quant::simd::Isa;

mod common;

use common::{BLOCK_TYPES, Rng, dot_f64};

fn widths(ty: GgmlType) -> &'static [usize] {
    if ty.block_size() == 256 {
        &[1536, 4864]
    } else {
        &[576, 896, 1536, 4864]
    }
}

/// `n` tokens of `k` activations: normal, with an outlier, an all-zero token and tiny blocks.
fn tokens(n: usize, k: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = rng.normals(n * k);
    x[k / 3] = 300.0;
    if n > 2 {
        x[2 * k..3 * k].fill(0.0);
    }
    for v in &mut x[k..k + 32] {
        *v *= 1e-33;
    }
    x
}

/// Runs the GEMM on `isa` into an `n x m` matrix; every output written exactly once.
fn run(isa: Isa, p: &Panels, a: &Q16Acts, n: usize) -> Vec<f32> {
    let m = p.rows();
    let mut y = vec![f32::NAN; n * m];
    let mut seen = vec![0u8; n * m];
    gemm_q16_with(isa, p, a, n, |t, r0, v| {
        assert!(v.len() <= 32 && r0 + v.len() <= m);
        y[t * m + r0..t * m + r0 + v.len()].copy_from_slice(v);
        for s in &mut seen[t * m + r0..t * m + r0 + v.len()] {
            *s += 1;
        }
    })
    .unwrap();
    assert!(
        seen.iter().all(|&s| s == 1),
        "{isa:?}: outputs not written once"
    );
    y
}

#[test]
fn gemm_matches_scalar_tile_and_matvec_reference() {
    let mut rng = Rng(11);
    let isas = Isa::available();
    // 37 rows: one full panel and a partial one; 7 tokens: a full tile and a remainder.
    let (m, n) = (37, 7);
    // Reused across every shape and type: decoding must not depend on what it held before.
    let mut reused = Panels::new();
    for &ty in BLOCK_TYPES.iter().filter(|&&t| supports_gemm(t)) {
        let mut worst = 0.0f64;
        for &k in widths(ty) {
            let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
            let mut w = common::random_blocks(&mut rng, ty, m * row_bytes, |rng| {
                [1e-3f32, 0.02, 0.5][(rng.next_u64() % 3) as usize]
            });
            w[(m - 1) * row_bytes..].fill(0);
            let mut wf = vec![0.0f32; m * k];
            quant::dequantize(ty, &w, &mut wf).unwrap();
            let mut p = Panels::new();
            p.decode_with(Isa::Scalar, ty, &w, row_bytes, k).unwrap();
            assert_eq!((p.rows(), p.k(), p.panels()), (m, k, 2));
            reused.decode(ty, &w, row_bytes, k).unwrap();
            assert!(reused.raw() == p.raw(), "{ty} k={k}: reused panels differ");
            // A different row count in the same buffers, then back.
            reused
                .decode(ty, &w[..5 * row_bytes], row_bytes, k)
                .unwrap();
            assert_eq!(reused.rows(), 5);
            for &isa in &isas {
                let mut fast = Panels::new();
                fast.decode_with(isa, ty, &w, row_bytes, k).unwrap();
                assert!(fast.raw() == p.raw(), "{ty} k={k} {isa:?}: panels differ");
            }
            let x = tokens(n, k, &mut rng);
            let mut a = Q16Acts::new();
            a.quantize(&x).unwrap();
            let scalar = run(Isa::Scalar, &p, &a, n);
            for &isa in &isas {
                let y = run(isa, &p, &a, n);
                for (i, (u, v)) in y.iter().zip(&scalar).enumerate() {
                    assert_eq!(u.to_bits(), v.to_bits(), "{ty} k={k} {isa:?} output {i}");
                }
            }
            let mut at = Q16Acts::new();
            for t in 0..n {
                at.quantize(&x[t * k..(t + 1) * k]).unwrap();
                for r in 0..m {
                    let row = &w[r * row_bytes..(r + 1) * row_bytes];
                    let rf = reference::dot_q16(ty, row, &at).unwrap();
                    let (_, scale) = dot_f64(&wf[r * k..(r + 1) * k], &x[t * k..(t + 1) * k]);
                    let y = scalar[t * m + r];
                    if scale == 0.0 {
                        assert_eq!(y, 0.0, "{ty} k={k} t={t} r={r}");
                        continue;
                    }
                    let e = (y as f64 - rf as f64).abs() / scale;
                    worst = worst.max(e);
                    assert!(e <= 1e-6, "{ty} k={k} t={t} r={r}: {y} vs {rf}: {e:e}");
                }
            }
        }
        println!("{ty}: gemm vs matvec reference {worst:.1e}");
    }
}

/// Every token count from 1 to 13 (full tiles of each kernel's width and every remainder), on a
/// format with and one without minimum terms, every instruction set against the scalar tile.
#[test]
fn every_token_count_matches_the_scalar_tile() {
    let mut rng = Rng(12);
    let (m, k) = (40, 576);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
        let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
        let w = common::random_blocks(&mut rng, ty, m * row_bytes, |_| 0.02);
        let mut p = Panels::new();
        p.decode(ty, &w, row_bytes, k).unwrap();
        for n in 1..=13 {
            let x = rng.normals(n * k);
            let mut a = Q16Acts::new();
            a.quantize(&x).unwrap();
            let scalar = run(Isa::Scalar, &p, &a, n);
            for isa in Isa::available() {
                let y = run(isa, &p, &a, n);
                let same = y
                    .iter()
                    .zip(&scalar)
                    .all(|(u, v)| u.to_bits() == v.to_bits());
                assert!(
                    same,
                    "{ty} {isa:?} with {n} tokens differs from the scalar tile"
                );
            }
        }
    }
}

#[test]
fn gemm_rejects_bad_input() {
    let mut p = Panels::new();
    let ty = GgmlType::Q4_0;
    let row = vec![0u8; 18 * 18];
    assert!(p.decode(GgmlType::F32, &row, 18 * 18, 576).is_err());
    assert!(p.decode(GgmlType::Q2_K, &row, 18 * 18, 576).is_err());
    assert!(matches!(
        p.decode(ty, &row, 18 * 18, 570),
        Err(QuantError::NotWholeBlocks { .. })
    ));
    assert!(matches!(
        p.decode(ty, &row, 18 * 17, 576),
        Err(QuantError::Length { .. })
    ));
    assert!(matches!(
        p.decode(ty, &row[..18 * 18 - 1], 18 * 18, 576),
        Err(QuantError::Length { .. })
    ));
    assert_eq!(p.rows(), 0);
    p.decode(ty, &row, 18 * 18, 576).unwrap();
    let mut a = Q16Acts::new();
    a.quantize(&vec![1.0; 576 * 2]).unwrap();
    let sink = |_: usize, _: usize, _: &[f32]| {};
    assert!(matches!(
        gemm_q16(&p, &a, 3, sink),
        Err(QuantError::Length { .. })
    ));
    gemm_q16(&p, &a, 2, sink).unwrap();
    // No rows, or no tokens: nothing to do.
    p.decode(ty, &[], 18 * 18, 576).unwrap();
    gemm_q16(&p, &a, 2, |_, _, _| panic!("no rows")).unwrap();
    a.quantize(&[]).unwrap();
    let mut p = Panels::new();
    p.decode(ty, &row, 18 * 18, 576).unwrap();
    gemm_q16(&p, &a, 0, |_, _, _| panic!("no tokens")).unwrap();
}

#[test]
fn quantize_split_matches_quantize() {
    let mut rng = Rng(5);
    let x = tokens(5, 896, &mut rng);
    let mut serial = Q16Acts::new();
    serial.quantize(&x).unwrap();
    let mut split = Q16Acts::new();
    for chunk in [1, 32, 896, 1000, 896 * 5, 1 << 20] {
        // Reused: a longer input first must leave nothing behind.
        split.quantize(&tokens(7, 896, &mut rng)).unwrap();
        split
            .quantize_split(&x, chunk, |jobs| {
                jobs.into_iter().map(|j| j.run()).fold(true, |a, b| a & b)
            })
            .unwrap();
        assert_eq!(split.q(), serial.q(), "chunk {chunk}");
        assert_eq!(split.dx(), serial.dx());
        assert_eq!(split.sx(), serial.sx());
        assert_eq!(split.isum16(), serial.isum16());
    }
    let mut bad = x.clone();
    bad[1000] = f32::NAN;
    let mut split = Q16Acts::new();
    let e = split.quantize_split(&bad, 64, |jobs| jobs.into_iter().all(|j| j.run()));
    assert_eq!(e, serial.quantize(&bad));
    assert!(split.is_empty());
    assert!(split.quantize_split(&x[..33], 64, |_| true).is_err());
}

/// Throughput on one thread (`cargo test --release -p quant --test q16_gemm -- --ignored
/// --nocapture`): decode and GEMM of prefill-sized shapes.
#[test]
#[ignore]
fn gemm_speed() {
    let mut rng = Rng(1);
    let n = 512;
    for (ty, m, k) in [
        (GgmlType::Q5_0, 256, 896),
        (GgmlType::Q4_1, 256, 576),
        (GgmlType::Q6_K, 128, 4864),
        (GgmlType::Q4_K, 128, 4864),
    ] {
        let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
        let w = common::random_blocks(&mut rng, ty, m * row_bytes, |_| 0.01);
        let x = rng.normals(n * k);
        let mut a = Q16Acts::new();
        a.quantize(&x).unwrap();
        let mut p = Panels::new();
        let only = std::env::var("GEMM_SPEED_TY").unwrap_or_default();
        if !only.is_empty() && only != ty.to_string() {
            continue;
        }
        let reps: usize = std::env::var("GEMM_SPEED_REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        let t = std::time::Instant::now();
        for _ in 0..reps {
            p.decode(ty, &w, row_bytes, k).unwrap();
        }
        let dec = t.elapsed().as_secs_f64() / reps as f64;
        for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
            let mut sum = 0.0f32;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                gemm_q16_with(isa, &p, &a, n, |_, _, v| sum += v[0]).unwrap();
            }
            let g = t.elapsed().as_secs_f64() / reps as f64;
            let macs = (m * n * k) as f64;
            println!(
                "{ty} {m}x{k} x {n} tokens, {isa:?}: decode {:.2} ns/weight ({:.1}% of gemm), \
                 gemm {:.1} GMAC/s ({sum})",
                dec * 1e9 / (m * k) as f64,
                100.0 * dec / g,
                macs / g / 1e9
            );
        }
    }
}
