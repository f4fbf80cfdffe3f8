//! Conformance of each CUDA kernel with the CPU reference on random data of real shapes (odd row
//! counts included), within 1e-3 relative error (‖gpu − cpu‖ / ‖cpu‖).

mod common;

use common::{ALL_TYPES, MixedSegs, Rng, bits, gpu, matrix, rel, widths};
use cpu::ops;
use cuda::testing::{self, HeadShape, Input, Kernel, Seg};
use gguf::GgmlType;
use half::f16;
use model::FfnAct;

const TOL: f64 = 1e-3;

fn dot64(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum::<f64>() as f32
}

#[test]
fn matvec_every_type_and_width() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(1);
    for ty in ALL_TYPES {
        for cols in widths(ty) {
            let rows = 37 + cols % 7;
            let (w, _) = matrix(&mut rng, ty, rows, cols);
            let x = rng.vec(cols, 1.0);
            let row_bytes = w.len() / rows;
            let cpu: Vec<f32> = (0..rows)
                .map(|r| quant::dot(ty, &w[r * row_bytes..(r + 1) * row_bytes], &x).unwrap())
                .collect();
            let seg = Seg {
                ty,
                rows,
                w: &w,
                bias: None,
                acc: None,
            };
            let out = testing::matvec(&g, Kernel::Matvec, &[seg], cols, &x, Input::Plain)
                .unwrap()
                .remove(0);
            let e = rel(&out, &cpu);
            println!("matvec {ty:5} {rows:3}x{cols:4}: rel {e:.2e}");
            assert!(e < TOL, "matvec {ty} {rows}x{cols}: relative error {e}");
        }
    }
}

/// Fixed-point rows (the graph path's wo when the persistent kernel folds it into attention):
/// `matvec` and `matvec_wide` give the same bits for every legacy q16 format at every width (576
/// and 896 among them), within float rounding of the exact sum of the f32 input (they read it,
/// not its 16-bit quantization), and at least as close to it as the f32 rows.
#[test]
fn fixed_point_rows_agree_across_kernels_and_with_the_exact_sum() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(29);
    let legacy = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ];
    for ty in legacy {
        for cols in widths(ty) {
            let rows = 97 + cols % 5;
            let (w, deq) = matrix(&mut rng, ty, rows, cols);
            let x = rng.vec(cols, 1.0);
            let acc = rng.vec(rows, 4.0);
            let exact: Vec<f32> = (0..rows)
                .map(|r| {
                    let row = &deq[r * cols..(r + 1) * cols];
                    let d: f64 = row
                        .iter()
                        .zip(&x)
                        .map(|(&w, &v)| f64::from(w) * f64::from(v))
                        .sum();
                    (d + f64::from(acc[r])) as f32
                })
                .collect();
            let seg = || Seg {
                ty,
                rows,
                w: &w,
                bias: None,
                acc: Some(&acc),
            };
            let f = testing::matvec(&g, Kernel::Matvec, &[seg()], cols, &x, Input::Plain).unwrap();
            let fixed = Input::PlainFixed;
            let a = testing::matvec(&g, Kernel::Matvec, &[seg()], cols, &x, fixed).unwrap();
            let b = testing::matvec(&g, Kernel::Wide, &[seg()], cols, &x, fixed).unwrap();
            assert_eq!(
                bits(&a[0]),
                bits(&b[0]),
                "fixed rows, wide {ty} {rows}x{cols}"
            );
            let (e, ef) = (rel(&a[0], &exact), rel(&f[0], &exact));
            println!("fixed {ty:5} {rows:3}x{cols:4}: rel {e:.2e} (f32 rows {ef:.2e})");
            assert!(
                e < 1e-6 && e <= ef,
                "fixed rows against the exact sum, {ty} {rows}x{cols}: {e} (f32 rows {ef})"
            );
            // A NaN input makes every row NaN, as the f32 sum does (not a wrapped integer).
            let mut xn = x.clone();
            xn[cols - 1] = f32::NAN;
            for k in [Kernel::Matvec, Kernel::Wide] {
                let n = testing::matvec(&g, k, &[seg()], cols, &xn, fixed).unwrap();
                assert!(
                    n[0].iter().all(|v| v.is_nan()),
                    "NaN rows, {k:?} {ty} {cols}"
                );
            }
        }
    }
}

#[test]
fn matvec_fused_input_bias_residual_and_mixed_segments() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(2);
    let m = MixedSegs::new(&mut rng);
    let cols = m.cols;
    let mut normed = vec![0.0f32; cols];
    ops::rms_norm(&m.x, &m.aux, 1e-5, &mut normed);
    let mut glu = m.x.clone();
    ops::swiglu(&mut glu, &m.aux);
    let mut geglu = m.x.clone();
    ops::geglu(&mut geglu, &m.aux);
    let cases: [(&str, Input, &[f32]); 4] = [
        ("plain", Input::Plain, &m.x),
        (
            "rmsnorm",
            Input::RmsNorm {
                w: &m.aux,
                eps: 1e-5,
            },
            &normed,
        ),
        ("swiglu", Input::SwiGlu { up: &m.aux }, &glu),
        ("geglu", Input::GeGlu { up: &m.aux }, &geglu),
    ];
    let segs = m.segs();
    for (name, input, xin) in cases {
        let outs = testing::matvec(&g, Kernel::Matvec, &segs, cols, &m.x, input).unwrap();
        for (i, out) in outs.iter().enumerate() {
            let cpu: Vec<f32> = (0..m.rows[i])
                .map(|r| {
                    dot64(&m.mats[i].1[r * cols..(r + 1) * cols], xin) + m.bias[i][r] + m.acc[i][r]
                })
                .collect();
            let e = rel(out, &cpu);
            println!("matvec fused {name:7} {:5}: rel {e:.2e}", m.types[i]);
            assert!(
                e < TOL,
                "fused matvec {name} segment {i}: relative error {e}"
            );
        }
    }
}

/// A prefill matmul case of real widths and odd row/token counts: weights, input, bias and
/// residual, and the f64 products W·x (no bias, no residual).
struct MatmulCase {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
    w: Vec<u8>,
    x: Vec<f32>,
    bias: Vec<f32>,
    acc: Vec<f32>,
    prod: Vec<f32>,
}

impl MatmulCase {
    /// y = prod (+ bias) (+ acc).
    fn want(&self, bias: bool, acc: bool) -> Vec<f32> {
        (0..self.n * self.rows)
            .map(|i| {
                self.prod[i]
                    + if bias { self.bias[i % self.rows] } else { 0.0 }
                    + if acc { self.acc[i] } else { 0.0 }
            })
            .collect()
    }
}

/// Every type at each width it can hold, with token counts from `ns`.
fn matmul_cases(seed: u64, ns: [usize; 4]) -> Vec<MatmulCase> {
    let mut rng = Rng::new(seed);
    let mut cases = Vec::new();
    for ty in ALL_TYPES {
        for (i, cols) in widths(ty).into_iter().enumerate() {
            let rows = [77usize, 130, 33, 65][i % 4];
            let n = ns[(i + ty.id() as usize) % 4];
            let (w, deq) = matrix(&mut rng, ty, rows, cols);
            let x = rng.vec(n * cols, 1.0);
            let (bias, acc) = (rng.vec(rows, 1.0), rng.vec(n * rows, 1.0));
            let prod = (0..n * rows)
                .map(|i| {
                    let (t, r) = (i / rows, i % rows);
                    dot64(&deq[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols])
                })
                .collect();
            cases.push(MatmulCase {
                ty,
                rows,
                cols,
                n,
                w,
                x,
                bias,
                acc,
                prod,
            });
        }
    }
    cases
}

#[test]
fn matmul_every_type_odd_shapes() {
    let Some(g) = gpu() else { return };
    for c in matmul_cases(3, [7, 65, 1, 130]) {
        let (ty, rows, cols, n) = (c.ty, c.rows, c.cols, c.n);
        let out =
            testing::matmul(&g, ty, rows, cols, &c.w, &c.x, Some(&c.bias), Some(&c.acc)).unwrap();
        let e = rel(&out, &c.want(true, true));
        println!("matmul {ty:5} {rows:3}x{cols:4} n={n:3}: rel {e:.2e}");
        assert!(
            e < TOL,
            "matmul {ty} {rows}x{cols} n={n}: relative error {e}"
        );
        // Without bias or accumulation (the outputs start poisoned with NaN).
        let out = testing::matmul(&g, ty, rows, cols, &c.w, &c.x, None, None).unwrap();
        assert!(
            rel(&out, &c.want(false, false)) < TOL,
            "matmul {ty}: plain product"
        );
    }
}

/// The cuBLAS prefill path (weights dequantized to f16, activations rounded to f16, f32
/// accumulation) against the f64 product: within f16 rounding, 1e-3 relative.
#[test]
fn cublas_matmul_every_type() {
    let Some(g) = gpu() else { return };
    for c in matmul_cases(13, [37, 65, 512, 130]) {
        let (ty, rows, cols, n) = (c.ty, c.rows, c.cols, c.n);
        let Some(out) =
            testing::matmul_cublas(&g, ty, rows, cols, &c.w, &c.x, Some(&c.bias), None).unwrap()
        else {
            println!("skipped: cuBLAS not available");
            return;
        };
        let e = rel(&out, &c.want(true, false));
        println!("cublas {ty:5} {rows:3}x{cols:4} n={n:3}: rel {e:.2e}");
        assert!(
            e < 1e-3,
            "cublas {ty} {rows}x{cols} n={n}: relative error {e}"
        );
        // Accumulating onto y (the residual), no bias.
        let out = testing::matmul_cublas(&g, ty, rows, cols, &c.w, &c.x, None, Some(&c.acc))
            .unwrap()
            .unwrap_or_default();
        let e = rel(&out, &c.want(false, true));
        assert!(e < 1e-3, "cublas {ty} accumulate: relative error {e}");
    }
}

#[test]
fn embedding_every_type() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(4);
    for ty in ALL_TYPES {
        let cols = widths(ty)[0];
        let rows = 301;
        let (w, deq) = matrix(&mut rng, ty, rows, cols);
        let tokens: Vec<u32> = (0..9)
            .map(|_| rng.below(rows) as u32)
            .chain([0, rows as u32 - 1])
            .collect();
        let out = testing::embed(&g, ty, rows, cols, &w, &tokens).unwrap();
        let cpu: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| deq[t as usize * cols..][..cols].to_vec())
            .collect();
        // Dequantization is exact arithmetic on both sides up to fma contraction.
        let e = rel(&out, &cpu);
        assert!(e < 1e-6, "embed {ty}: relative error {e}");
    }
    assert!(testing::embed(&g, GgmlType::Q8_0, 2, 32, &[0u8; 68], &[2]).is_err());
}

#[test]
fn rms_norm_swiglu_and_geglu() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(5);
    for cols in [576usize, 896, 4864] {
        let x = rng.vec(5 * cols, 3.0);
        let w = rng.vec(cols, 1.0);
        let mut cpu = vec![0.0f32; x.len()];
        ops::rms_norm(&x, &w, 1e-6, &mut cpu);
        let e = rel(&testing::rms_norm(&g, &x, &w, 1e-6).unwrap(), &cpu);
        assert!(e < TOL, "rms_norm {cols}: {e}");
        let u = rng.vec(x.len(), 2.0);
        let mut cpu = x.clone();
        ops::swiglu(&mut cpu, &u);
        let e = rel(&testing::glu(&g, FfnAct::Silu, &x, &u).unwrap(), &cpu);
        assert!(e < TOL, "swiglu {cols}: {e}");
        let mut cpu = x.clone();
        ops::geglu(&mut cpu, &u);
        let e = rel(&testing::glu(&g, FfnAct::GeluTanh, &x, &u).unwrap(), &cpu);
        assert!(e < TOL, "geglu {cols}: {e}");
    }
}

fn rope_table(
    hp_rot: usize,
    head_dim: usize,
    neox: bool,
    base: f64,
    factors: Option<&[f32]>,
) -> ops::Rope {
    let mut hp = synth_hparams();
    hp.n_rot = hp_rot;
    hp.head_dim = head_dim;
    hp.rope_base = base;
    hp.rope_style = if neox {
        model::RopeStyle::Neox
    } else {
        model::RopeStyle::Normal
    };
    ops::Rope::new(&hp, factors)
}

fn synth_hparams() -> model::HParams {
    let bytes = model::synth::build(&model::synth::SynthSpec::tiny("llama")).unwrap();
    model::Model::from_file(gguf::GgufFile::from_bytes(bytes).unwrap())
        .unwrap()
        .hp
}

/// A rope table and the head shape of a test case (values as wide as keys).
fn rope_case(
    nh: usize,
    nkv: usize,
    hd: usize,
    n_rot: usize,
    neox: bool,
    base: f64,
    fac: Option<&[f32]>,
) -> (ops::Rope, HeadShape) {
    let shape = HeadShape {
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        head_dim_v: hd,
        n_rot,
        neox,
        scale: 1.0 / (hd as f32).sqrt(),
        window: 0,
        softcap: 0.0,
    };
    (rope_table(n_rot, hd, neox, base, fac), shape)
}

/// `rope_attention` (one launch, one-token decode's default) gives the bits of `rope_store` then
/// `attention`: output and both caches, llama and neox rotation, partial rotation, grouped and
/// plain heads, heads not a multiple of 64 wide, at the first position, a short cache, the end of
/// an attention tile and one past it.
#[test]
fn rope_attention_gives_the_bits_of_rope_store_then_attention() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(17);
    // (n_head, n_head_kv, head_dim, n_rot, neox, base)
    let cases = [
        (9, 3, 64, 64, false, 10000.0),
        (14, 2, 64, 64, true, 1_000_000.0),
        (8, 2, 64, 32, true, 10000.0),
        (32, 8, 128, 128, false, 500000.0),
        (4, 4, 128, 128, true, 10000.0),
        (6, 2, 96, 96, true, 10000.0),
    ];
    for (nh, nkv, hd, n_rot, neox, base) in cases {
        let (rope, shape) = rope_case(nh, nkv, hd, n_rot, neox, base, None);
        // 255: the last position of one tile (the last one rope_attention stages).
        for pos in [0usize, 37, 255, 1100] {
            let q = rng.vec(nh * hd, 1.0);
            let k = rng.vec(nkv * hd, 1.0);
            let v = rng.vec(nkv * hd, 1.0);
            let keys = rng.vec(pos * nkv * hd, 1.0);
            let values = rng.vec(pos * nkv * hd, 1.0);
            let run = |mode| {
                testing::rope_attention(
                    &g,
                    &shape,
                    &rope.freqs,
                    (&q, &k, &v),
                    (&keys, &values),
                    pos,
                    mode,
                )
                .unwrap()
            };
            let (a, ak, av, _) = run((false, false, 1));
            let (b, bk, bv, _) = run((true, false, 1));
            let tag = format!("heads {nh}/{nkv} hd {hd} n_rot {n_rot} neox {neox} pos {pos}");
            assert_eq!(bits(&a), bits(&b), "{tag}: output");
            assert_eq!(ak, bk, "{tag}: keys");
            assert_eq!(av, bv, "{tag}: values");
            // With wo's input quantized in the same launch (MOLLA_ATT_PREP): the same output,
            // and the q16 row matvec_prep_wide makes of it.
            let (c, ck, cv, cq) = run((true, true, 1));
            assert_eq!(bits(&a), bits(&c), "{tag}: output with the q16 row");
            assert_eq!((ak, av), (ck, cv), "{tag}: caches with the q16 row");
            let want = testing::prep_q16(&g, &c, Input::Plain).unwrap();
            assert_eq!(want, cq, "{tag}: q16 row");
        }
    }
    println!("rope_attention: the bits of rope_store then attention");
}

#[test]
fn rope_and_cache_store_both_styles() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(6);
    let factors: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.25).collect();
    // (n_head, n_head_kv, head_dim, n_rot, neox, freq factors, base)
    type Case<'a> = (usize, usize, usize, usize, bool, Option<&'a [f32]>, f64);
    let cases: [Case; 4] = [
        (9, 3, 64, 64, false, None, 10000.0),
        (14, 2, 64, 64, true, None, 1_000_000.0),
        (8, 2, 64, 32, true, None, 10000.0),
        (4, 1, 64, 64, false, Some(&factors), 500000.0),
    ];
    for (nh, nkv, hd, n_rot, neox, fac, base) in cases {
        let (rope, shape) = rope_case(nh, nkv, hd, n_rot, neox, base, fac);
        let (n, pos0, cap) = (6, 3000, 3010);
        let q = rng.vec(n * nh * hd, 1.0);
        let k = rng.vec(n * nkv * hd, 1.0);
        let v = rng.vec(n * nkv * hd, 1.0);
        let (mut cq, mut ck) = (q.clone(), k.clone());
        for t in 0..n {
            rope.apply(&mut cq[t * nh * hd..(t + 1) * nh * hd], hd, pos0 + t);
            rope.apply(&mut ck[t * nkv * hd..(t + 1) * nkv * hd], hd, pos0 + t);
        }
        let kv_dim = nkv * hd;
        // f16 caches, then f32 ones (stored as computed: the rope's own accuracy).
        for (f32, tol) in [(false, TOL), (true, 1e-5)] {
            let (gq, gk, gv) =
                testing::rope_store(&g, &shape, &rope.freqs, &q, &k, &v, pos0, cap, f32).unwrap();
            let e = rel(&gq, &cq);
            assert!(e < 1e-5, "rope q (neox {neox}, n_rot {n_rot}): {e}");
            let stored_k = &gk[pos0 * kv_dim..(pos0 + n) * kv_dim];
            let stored_v = &gv[pos0 * kv_dim..(pos0 + n) * kv_dim];
            let ek = rel(stored_k, &ck);
            let ev = rel(stored_v, &v);
            println!(
                "rope nh {nh} neox {neox} n_rot {n_rot} f32 cache {f32}: q {e:.2e} k {ek:.2e} v {ev:.2e}"
            );
            assert!(
                ek < tol && ev < tol,
                "cache store (f32 {f32}): k {ek} v {ev}"
            );
            if f32 {
                assert_eq!(stored_v, &v[..], "an f32 cache stores v as it is");
            }
            // Positions outside pos0..pos0+n stay untouched (NaN poison).
            assert!(gk[..pos0 * kv_dim].iter().all(|x| x.is_nan()));
            assert!(gk[(pos0 + n) * kv_dim..].iter().all(|x| x.is_nan()));
        }
    }
}

/// f64 reference of causal GQA attention over positions 0..pos0+t+1 (the last `s.window` of
/// them when it is not 0), scores times `s.scale`, soft-capped by `s.softcap` when it is not 0.
fn attention_ref(s: &HeadShape, q: &[f32], keys: &[f32], values: &[f32], pos0: usize) -> Vec<f32> {
    let (hd, hdv) = (s.head_dim, s.head_dim_v);
    let (kvd, vd, qd) = (s.n_head_kv * hd, s.n_head_kv * hdv, s.n_head * hd);
    let n = q.len() / qd;
    let group = s.n_head / s.n_head_kv;
    let mut out = vec![0.0f32; n * s.n_head * hdv];
    for t in 0..n {
        for h in 0..s.n_head {
            let kvh = h / group;
            let qh = &q[t * qd + h * hd..][..hd];
            let end = pos0 + t + 1;
            let lo = if s.window > 0 {
                end.saturating_sub(s.window)
            } else {
                0
            };
            let cap = f64::from(s.softcap);
            let sc: Vec<f64> = (lo..end)
                .map(|p| {
                    let kr = &keys[p * kvd + kvh * hd..][..hd];
                    let x = qh
                        .iter()
                        .zip(kr)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum::<f64>()
                        * f64::from(s.scale);
                    if cap != 0.0 {
                        cap * (x / cap).tanh()
                    } else {
                        x
                    }
                })
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
            let sum: f64 = w.iter().sum();
            for d in 0..hdv {
                let v: f64 = (lo..end)
                    .map(|p| w[p - lo] * f64::from(values[p * vd + kvh * hdv + d]))
                    .sum();
                out[t * s.n_head * hdv + h * hdv + d] = (v / sum) as f32;
            }
        }
    }
    out
}

#[test]
fn attention_decode_prefill_and_long_cache() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(7);
    // (n_head, n_head_kv, head_dim, n queries, pos0)
    let cases = [
        (9, 3, 64, 1, 0),
        (9, 3, 64, 1, 100),
        (9, 3, 64, 17, 0),
        (14, 2, 64, 5, 300),
        (32, 8, 128, 1, 2000),
        (8, 8, 96, 3, 40),
    ];
    for (nh, nkv, hd, n, pos0) in cases {
        let s = HeadShape {
            n_head: nh,
            n_head_kv: nkv,
            head_dim: hd,
            head_dim_v: hd,
            n_rot: hd,
            neox: false,
            scale: 1.0 / (hd as f32).sqrt(),
            window: 0,
            softcap: 0.0,
        };
        let len = pos0 + n;
        let q = rng.vec(n * nh * hd, 1.0);
        // Round the cache through f16 so the reference sees what the kernel sees.
        let r16 = |v: Vec<f32>| -> Vec<f32> {
            v.into_iter().map(|x| f16::from_f32(x).to_f32()).collect()
        };
        let keys = rng.vec(len * nkv * hd, 1.0);
        let values = rng.vec(len * nkv * hd, 1.0);
        // An f16 cache (the reference sees the rounded values), then an f32 one.
        for f32 in [false, true] {
            let (keys, values) = if f32 {
                (keys.clone(), values.clone())
            } else {
                (r16(keys.clone()), r16(values.clone()))
            };
            let out = testing::attention(&g, &s, &q, &keys, &values, pos0, f32, 1).unwrap();
            let e = rel(&out, &attention_ref(&s, &q, &keys, &values, pos0));
            println!("attention {nh}/{nkv} hd {hd} n {n} pos0 {pos0} f32 cache {f32}: rel {e:.2e}");
            assert!(
                e < TOL,
                "attention {nh}/{nkv} hd {hd} n {n} pos0 {pos0} f32 {f32}: {e}"
            );
        }
    }
}

/// Decode attention split over several blocks a head (launch/split.rs) gives the bits of one
/// block: at one tile (nothing to split), just past it, and over several tiles (up to 17 of the
/// default 256 positions), with more and fewer blocks than tiles; `attention` over f16 and f32 caches, and `rope_attention` with its
/// stores and its q16 row. Each split run launches twice on the same buffers (testing checks
/// that the second gives the same bits: the tickets reset).
#[test]
fn split_attention_gives_the_bits_of_one_block() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(23);
    // (n_head, n_head_kv, head_dim)
    for (nh, nkv, hd) in [(9, 3, 64), (14, 2, 64), (32, 8, 128), (8, 8, 96)] {
        let (rope, s) = rope_case(nh, nkv, hd, hd, false, 10000.0, None);
        let t = cuda::att_tile();
        for pos in [t - 1, t, 1023, 2500, 4200] {
            let len = pos + 1;
            let q = rng.vec(nh * hd, 1.0);
            let keys = rng.vec(len * nkv * hd, 1.0);
            let values = rng.vec(len * nkv * hd, 1.0);
            let tag = format!("heads {nh}/{nkv} hd {hd} pos {pos}");
            for f32 in [false, true] {
                let one = testing::attention(&g, &s, &q, &keys, &values, pos, f32, 1).unwrap();
                for split in [2usize, 3, 8] {
                    let out =
                        testing::attention(&g, &s, &q, &keys, &values, pos, f32, split).unwrap();
                    assert_eq!(bits(&one), bits(&out), "{tag} f32 {f32}: split {split}");
                }
            }
            let (k, v) = (rng.vec(nkv * hd, 1.0), rng.vec(nkv * hd, 1.0));
            let (kk, vv) = (&keys[..pos * nkv * hd], &values[..pos * nkv * hd]);
            let run = |split| {
                let m = (true, hd % 32 == 0, split);
                testing::rope_attention(&g, &s, &rope.freqs, (&q, &k, &v), (kk, vv), pos, m)
                    .unwrap()
            };
            let (a, ak, av, aq) = run(1);
            for split in [2usize, 5] {
                let (b, bk, bv, bq) = run(split);
                assert_eq!(bits(&a), bits(&b), "{tag}: rope_attention split {split}");
                assert_eq!(
                    (&ak, &av, &aq),
                    (&bk, &bv, &bq),
                    "{tag}: stores, q16, split {split}"
                );
            }
        }
    }
    println!("split attention: the bits of one block a head");
}

/// Sliding-window layers and soft-capped scores (gemma): attention over f16 and f32 caches
/// against the f64 reference, for prefill rows that cross the window, and decode at positions
/// inside one tile and many tiles past the window (tiles wholly before it skipped), split over
/// blocks (the same bits as one block) and fused with the rope (`rope_attention`, staged and
/// not: the same bits as `rope_store` then `attention`); gemma3's 256-wide heads among them.
#[test]
fn attention_windows_and_softcaps() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(29);
    // (n_head, n_head_kv, head_dim, window, softcap, scale)
    let cases = [
        (4, 1, 256, 7, 0.0, 0.0625),
        (9, 3, 64, 300, 0.0, 0.125),
        (8, 4, 128, 0, 50.0, 0.3),
        (8, 2, 64, 5, 30.0, 0.125),
    ];
    for (nh, nkv, hd, window, softcap, scale) in cases {
        let (rope, base) = rope_case(nh, nkv, hd, hd, true, 10000.0, None);
        let s = HeadShape {
            window,
            softcap,
            scale,
            ..base
        };
        let r16 = |v: Vec<f32>| -> Vec<f32> {
            v.into_iter().map(|x| f16::from_f32(x).to_f32()).collect()
        };
        // Scores far past the cap, so that it matters.
        let amp = if softcap > 0.0 { 12.0 } else { 1.0 };
        for (n, pos0) in [
            (12usize, 0usize),
            (5, 40),
            (1, 3),
            (1, 255),
            (1, 700),
            (1, 1400),
        ] {
            let len = pos0 + n;
            let q = rng.vec(n * nh * hd, amp);
            let keys = r16(rng.vec(len * nkv * hd, 1.0));
            let values = r16(rng.vec(len * nkv * hd, 1.0));
            let tag =
                format!("heads {nh}/{nkv} hd {hd} window {window} cap {softcap} n {n} pos0 {pos0}");
            let want = attention_ref(&s, &q, &keys, &values, pos0);
            for f32 in [false, true] {
                let out = testing::attention(&g, &s, &q, &keys, &values, pos0, f32, 1).unwrap();
                let e = rel(&out, &want);
                println!("{tag} f32 {f32}: rel {e:.2e}");
                assert!(e < TOL, "{tag} f32 {f32}: {e}");
                if n == 1 {
                    for split in [2usize, 3] {
                        let sp = testing::attention(&g, &s, &q, &keys, &values, pos0, f32, split)
                            .unwrap();
                        assert_eq!(bits(&out), bits(&sp), "{tag} f32 {f32}: split {split}");
                    }
                }
            }
            if n == 1 {
                let (k, v) = (rng.vec(nkv * hd, 1.0), rng.vec(nkv * hd, 1.0));
                let (kk, vv) = (&keys[..pos0 * nkv * hd], &values[..pos0 * nkv * hd]);
                let run = |m| {
                    testing::rope_attention(&g, &s, &rope.freqs, (&q, &k, &v), (kk, vv), pos0, m)
                        .unwrap()
                };
                let (a, ak, av, _) = run((false, false, 1));
                let (b, bk, bv, _) = run((true, false, 1));
                assert_eq!(bits(&a), bits(&b), "{tag}: rope_attention");
                assert_eq!((ak, av), (bk, bv), "{tag}: rope_attention's stores");
                let (c, _, _, _) = run((true, false, 3));
                assert_eq!(bits(&a), bits(&c), "{tag}: rope_attention split 3");
            }
        }
    }
    println!("attention: windows and soft-caps match the f64 reference");
}

#[test]
fn bad_lengths_are_errors() {
    let Some(g) = gpu() else { return };
    assert!(testing::rms_norm(&g, &[1.0; 5], &[1.0; 2], 1e-5).is_err());
    assert!(testing::glu(&g, FfnAct::Silu, &[1.0; 5], &[1.0; 4]).is_err());
    let seg = Seg {
        ty: GgmlType::Q8_0,
        rows: 2,
        w: &[0u8; 10],
        bias: None,
        acc: None,
    };
    assert!(testing::matvec(&g, Kernel::Matvec, &[seg], 32, &[0.0; 32], Input::Plain).is_err());
    assert!(
        testing::matmul(
            &g,
            GgmlType::Q4_K,
            1,
            32,
            &[0u8; 18],
            &[0.0; 32],
            None,
            None
        )
        .is_err()
    );
}
