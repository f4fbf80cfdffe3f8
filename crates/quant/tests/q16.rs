//! q16 kernels: every instruction set this CPU has (the scalar fallback included) against the scalar
//! twin `reference::dot_q16`, and that twin against an f64 dot of the dequantized weights.

use gguf::GgmlType;
use quant::q16::{Q16Acts, matvec_q16, matvec_q16_with, reference, supports_q16};
use quant::simd::Isa;
use quant::{Op, QuantError};

mod common;

use common::{BLOCK_TYPES as TYPES, Rng, dot_f64};

fn widths(ty: GgmlType) -> &'static [usize] {
    if ty.block_size() == 256 {
        &[1536, 4608, 4096, 14336]
    } else {
        &[576, 896, 1536, 4864]
    }
}

/// `m` random rows of `n` weights: random bytes with finite f16 scales of varied magnitude; the last
/// row is all zero bytes.
fn random_rows(ty: GgmlType, m: usize, n: usize, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = ty.bytes_for(n as u64).unwrap() as usize;
    let mut v = common::random_blocks(rng, ty, m * row_bytes, |rng| {
        [1e-3f32, 0.02, 0.5][(rng.next_u64() % 3) as usize]
    });
    let last = (m - 1) * row_bytes;
    v[last..].fill(0);
    v
}

/// Activation vectors of length `n`: normal; normal with one large outlier; all zero; and normal
/// with some all-zero blocks and a tiny block.
fn activations(n: usize, rng: &mut Rng) -> Vec<Vec<f32>> {
    let normal: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let mut outlier = normal.clone();
    outlier[n / 3] = 300.0;
    let mut holes = normal.clone();
    holes[32..64].fill(0.0);
    holes[n - 32..].fill(0.0);
    for v in &mut holes[64..96] {
        *v *= 1e-29;
    }
    for v in &mut holes[96..128] {
        *v *= 1e-36;
    }
    vec![normal, outlier, vec![0.0; n], holes]
}

#[test]
fn kernels_match_reference_and_f64() {
    let mut rng = Rng(7);
    let isas = Isa::available();
    let m = 7; // one group of 4 rows and a remainder of 3
    for &ty in TYPES {
        assert!(supports_q16(ty), "{ty}");
        // Worst relative error of the reference against f64 per activation kind (normal, outlier,
        // zero, holes), and of the kernels against the reference.
        let mut worst_ref = [0.0f64; 4];
        let mut worst_simd = 0.0f64;
        // The scalar f32 `quant::dot` (no activation quantization) against f64, for scale.
        let mut worst_f32 = [0.0f64; 4];
        for &n in widths(ty) {
            let row_bytes = ty.bytes_for(n as u64).unwrap() as usize;
            let w = random_rows(ty, m, n, &mut rng);
            let mut wf = vec![0.0f32; m * n];
            quant::dequantize(ty, &w, &mut wf).unwrap();
            for (kind, x) in activations(n, &mut rng).into_iter().enumerate() {
                let mut a = Q16Acts::new();
                a.quantize(&x).unwrap();
                assert_eq!(a.len(), n);
                let mut ys: Vec<Vec<f32>> = Vec::new();
                for &isa in &isas {
                    let mut y = vec![f32::NAN; m];
                    matvec_q16_with(isa, ty, &w, row_bytes, &a, &mut y).unwrap();
                    ys.push(y);
                }
                for r in 0..m {
                    let row = &w[r * row_bytes..(r + 1) * row_bytes];
                    let wr = &wf[r * n..(r + 1) * n];
                    let (exact, scale) = dot_f64(wr, &x);
                    let rf = reference::dot_q16(ty, row, &a).unwrap();
                    assert!(rf.is_finite());
                    if scale == 0.0 {
                        assert_eq!(rf, 0.0, "{ty} n={n} row {r}");
                    } else {
                        let e = (rf as f64 - exact).abs() / scale;
                        worst_ref[kind] = worst_ref[kind].max(e);
                        let f = quant::dot(ty, row, &x).unwrap();
                        worst_f32[kind] = worst_f32[kind].max((f as f64 - exact).abs() / scale);
                        assert!(
                            e <= 2e-4,
                            "{ty} n={n} row {r}: reference {rf} vs f64 {exact}: {e:e}"
                        );
                    }
                    for (isa, y) in isas.iter().zip(&ys) {
                        let e = (y[r] as f64 - rf as f64).abs() / scale.max(f64::MIN_POSITIVE);
                        if scale == 0.0 {
                            assert_eq!(y[r], 0.0, "{ty} {isa:?} n={n} row {r}");
                        } else {
                            worst_simd = worst_simd.max(e);
                            assert!(
                                e <= 1e-6,
                                "{ty} {isa:?} n={n} row {r}: {} vs reference {rf}: {e:e}",
                                y[r]
                            );
                        }
                    }
                }
            }
        }
        let [normal, outlier, _, holes] = worst_ref;
        let [f32_normal, f32_outlier, _, _] = worst_f32;
        println!(
            "{ty}: reference vs f64 {normal:.1e} (outlier {outlier:.1e}, holes {holes:.1e}); \
             kernels vs reference {worst_simd:.1e}; f32 dot vs f64 {f32_normal:.1e} \
             (outlier {f32_outlier:.1e})"
        );
    }
}

#[test]
fn quantize_rounds_within_half_a_step() {
    let mut rng = Rng(3);
    let mut a = Q16Acts::new();
    for n in [160, 576, 4864] {
        for x in activations(n, &mut rng) {
            a.quantize(&x).unwrap();
            for (b, xb) in x.chunks(32).enumerate() {
                let dx = a.dx()[b];
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                assert!(dx >= 0.0 && dx <= amax / 32767.0 * 1.000_001);
                assert!(dx > 0.0 || amax < 1e-30);
                let mut sum = 0.0f64;
                for (i, &v) in xb.iter().enumerate() {
                    let q = a.q()[32 * b + i];
                    assert!(q.unsigned_abs() <= 32767);
                    if dx > 0.0 {
                        assert!((q as f32 * dx - v).abs() <= dx * 0.51 + amax * 1e-6);
                    } else {
                        assert_eq!(q, 0);
                    }
                    sum += v as f64;
                }
                assert!(
                    (a.sx()[b] as f64 - sum).abs()
                        <= 1e-5 * xb.iter().map(|v| v.abs() as f64).sum::<f64>()
                );
                for h in 0..2 {
                    let s: i32 = a.q()[32 * b + 16 * h..32 * b + 16 * h + 16]
                        .iter()
                        .map(|&q| q as i32)
                        .sum();
                    assert_eq!(a.isum16()[2 * b + h], s);
                }
            }
        }
    }
}

#[test]
fn quantize_is_the_same_on_every_isa() {
    let mut rng = Rng(5);
    for n in [32, 160, 576, 4864] {
        for x in activations(n.max(160), &mut rng) {
            let mut want = Q16Acts::new();
            want.quantize_with(Isa::Scalar, &x).unwrap();
            for isa in Isa::available() {
                let mut a = Q16Acts::new();
                a.quantize_with(isa, &x).unwrap();
                assert_eq!(a.q(), want.q(), "{isa:?}");
                assert_eq!(a.isum16(), want.isum16(), "{isa:?}");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(a.dx()), bits(want.dx()), "{isa:?}");
                assert_eq!(bits(a.sx()), bits(want.sx()), "{isa:?}");
            }
        }
    }
}

#[test]
fn quantize_rejects_bad_input() {
    let mut a = Q16Acts::new();
    let (ty, op) = (GgmlType::I16, Op::Quantize);
    let (unit, block) = ("values", 32);
    let err = QuantError::NotWholeBlocks {
        ty,
        op,
        unit,
        got: 33,
        block,
    };
    assert_eq!(a.quantize(&[0.0; 33]), Err(err));
    let mut x = vec![1.0f32; 64];
    x[40] = f32::NAN;
    let (what, expected) = ("finite activations", 64);
    let err = QuantError::Length {
        ty,
        op,
        what,
        unit,
        got: 40,
        expected,
    };
    assert_eq!(a.quantize(&x), Err(err.clone()));
    assert_eq!(a.len(), 0);
    x[40] = f32::NEG_INFINITY;
    assert_eq!(a.quantize(&x), Err(err));
    x[40] = 2.0;
    a.quantize(&x).unwrap();
    assert_eq!(a.len(), 64);
    a.quantize(&[]).unwrap();
    assert!(a.is_empty());
}

#[test]
fn matvec_checks_lengths() {
    let ty = GgmlType::Q4_0;
    let mut a = Q16Acts::new();
    a.quantize(&[0.5; 64]).unwrap();
    let rows = vec![0u8; 3 * 36];
    let mut y = vec![0.0; 3];
    matvec_q16(ty, &rows, 36, &a, &mut y).unwrap();
    assert!(matches!(
        matvec_q16(ty, &rows, 18, &a, &mut y),
        Err(QuantError::Length { .. })
    ));
    assert!(matches!(
        matvec_q16(ty, &rows[1..], 36, &a, &mut y),
        Err(QuantError::Length { .. })
    ));
    assert!(matches!(
        matvec_q16(ty, &rows, 36, &a, &mut y[..2]),
        Err(QuantError::Length { .. })
    ));
    assert_eq!(
        matvec_q16(GgmlType::F16, &rows, 36, &a, &mut y),
        Err(QuantError::Unsupported {
            ty: GgmlType::F16,
            op: Op::Dot
        })
    );
    a.quantize(&[0.5; 32]).unwrap();
    assert!(matches!(
        matvec_q16(GgmlType::Q4_K, &[0u8; 144], 144, &a, &mut y[..1]),
        Err(QuantError::NotWholeBlocks { .. })
    ));
    assert!(reference::dot_q16(ty, &rows[..35], &a).is_err());
    // Empty activations and rows.
    a.quantize(&[]).unwrap();
    let mut y = vec![1.0; 2];
    matvec_q16(ty, &[], 0, &a, &mut y).unwrap();
    assert_eq!(y, [0.0, 0.0]);
}
