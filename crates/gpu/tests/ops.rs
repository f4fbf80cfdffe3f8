//! Conformance: every op of the wgpu backend against the CPU reference (crates/quant's scalar
//! dot and dequantize, crates/cpu's ops and attention), on random data of real shapes (SmolLM2's
//! 576 and Qwen2.5-0.5B's 896 widths among them). Skips with a message when no adapter is found.

mod common;

use common::{Rng, gpu, matrix, max_abs, max_rel};
use gguf::GgmlType;
use gpu::Heads;
use model::RopeStyle;

/// Matrix shapes (rows, cols) per format: widths of the real models, and odd row counts.
fn shapes(ty: GgmlType) -> Vec<(usize, usize)> {
    if ty.block_size() == 256 {
        vec![(64, 256), (37, 1536), (21, 4864)]
    } else {
        vec![(64, 576), (37, 896), (21, 1536), (5, 4864)]
    }
}

#[test]
fn matvec_every_format_matches_the_cpu_dot() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(1);
    for ty in gpu::formats() {
        let (mut worst, mut worst_abs) = (0.0f32, 0.0f32);
        for (rows, cols) in shapes(ty) {
            let (bytes, _) = matrix(&mut rng, ty, rows, cols);
            for n in [1usize, 3, 11] {
                let x = rng.vec(n * cols, 1.0);
                let got = gpu::ops::matvec(&g, ty, &bytes, (rows, cols), &x, None).unwrap();
                let rb = bytes.len() / rows;
                let want: Vec<f32> = (0..n)
                    .flat_map(|t| {
                        let xr = &x[t * cols..(t + 1) * cols];
                        (0..rows)
                            .map(|r| quant::dot(ty, &bytes[r * rb..(r + 1) * rb], xr).unwrap())
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let e = max_rel(&got, &want) / (cols as f32).sqrt();
                worst = worst.max(e);
                worst_abs = worst_abs.max(max_abs(&got, &want));
            }
        }
        println!(
            "matvec {ty}: max abs error {worst_abs:.2e}, max |gpu - cpu| / (1 + |cpu|) / sqrt(cols) = {worst:.2e}"
        );
        assert!(worst < 1e-5, "matvec {ty}: error {worst}");
    }
}

#[test]
fn matvec_adds_the_bias() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(2);
    let (rows, cols) = (128, 896);
    let (bytes, deq) = matrix(&mut rng, GgmlType::Q8_0, rows, cols);
    let x = rng.vec(cols, 1.0);
    let b = rng.vec(rows, 1.0);
    let got = gpu::ops::matvec(&g, GgmlType::Q8_0, &bytes, (rows, cols), &x, Some(&b)).unwrap();
    let want: Vec<f32> = (0..rows)
        .map(|r| {
            deq[r * cols..(r + 1) * cols]
                .iter()
                .zip(&x)
                .map(|(a, b)| a * b)
                .sum::<f32>()
                + b[r]
        })
        .collect();
    let e = max_abs(&got, &want);
    println!("matvec + bias: max abs error {e:.2e}");
    assert!(e < 1e-4);
    // The same in parts of 48 rows (as a matrix over the binding limit), 1 and 5 tokens.
    let x5 = rng.vec(5 * cols, 1.0);
    for x in [&x, &x5] {
        let one = gpu::ops::matvec(&g, GgmlType::Q8_0, &bytes, (rows, cols), x, Some(&b)).unwrap();
        let parts =
            gpu::ops::matvec_in_parts(&g, GgmlType::Q8_0, &bytes, (rows, cols), x, Some(&b), 48)
                .unwrap();
        assert_eq!(one, parts);
    }
}

#[test]
fn embed_every_format_matches_dequantize() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(3);
    for ty in gpu::formats() {
        let cols = if ty.block_size() == 256 { 1536 } else { 576 };
        let rows = 50;
        let (bytes, deq) = matrix(&mut rng, ty, rows, cols);
        let tokens = [0u32, 49, 7, 7, 23];
        let want: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| deq[t as usize * cols..(t as usize + 1) * cols].to_vec())
            .collect();
        for part_rows in [usize::MAX, 16] {
            let got = gpu::ops::embed(&g, ty, &bytes, (rows, cols), &tokens, part_rows).unwrap();
            let e = max_abs(&got, &want);
            let how = if part_rows == usize::MAX {
                "one buffer".to_string()
            } else {
                format!("parts of {part_rows} rows")
            };
            println!("embed {ty} ({how}): max abs error {e:.2e}");
            assert!(e == 0.0, "embed {ty}: {e}");
        }
    }
}

#[test]
fn rms_norm_matches() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(4);
    for cols in [576, 896] {
        let x = rng.vec(5 * cols, 3.0);
        let w = rng.vec(cols, 1.0);
        let got = gpu::ops::rms_norm(&g, &x, &w, 1e-5).unwrap();
        let mut want = vec![0.0; x.len()];
        cpu::ops::rms_norm(&x, &w, 1e-5, &mut want);
        let e = max_abs(&got, &want);
        println!("rms_norm {cols}: max abs error {e:.2e}");
        assert!(e < 1e-5);
    }
}

fn heads(n_head: usize, n_head_kv: usize, head_dim: usize, style: RopeStyle) -> Heads {
    Heads {
        n_head,
        n_head_kv,
        head_dim,
        head_dim_v: head_dim,
        n_rot: head_dim,
        neox: style == RopeStyle::Neox,
        scale: 1.0 / (head_dim as f32).sqrt(),
        softcap: None,
    }
}

#[test]
fn rope_both_styles_match() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(5);
    for style in [RopeStyle::Normal, RopeStyle::Neox] {
        let h = heads(9, 3, 64, style);
        let rope = cpu::ops::Rope {
            style,
            n_rot: 64,
            freqs: (0..32)
                .map(|i| 10000f64.powf(-2.0 * i as f64 / 64.0))
                .collect(),
        };
        let (n, start) = (4, 37);
        let q = rng.vec(n * 9 * 64, 1.0);
        let k = rng.vec(n * 3 * 64, 1.0);
        let (gq, gk) = gpu::ops::rope(&g, h, &rope, &q, &k, start).unwrap();
        let (mut wq, mut wk) = (q.clone(), k.clone());
        for t in 0..n {
            rope.apply(&mut wq[t * 576..(t + 1) * 576], 64, start + t);
            rope.apply(&mut wk[t * 192..(t + 1) * 192], 64, start + t);
        }
        let e = max_abs(&gq, &wq).max(max_abs(&gk, &wk));
        println!("rope {style:?}: max abs error {e:.2e}");
        assert!(e < 1e-6);
    }
}

/// Attention reference: softmax(q·k * scale) · v per head, causal (over the last `window`
/// positions when it is not 0), in f64.
fn attention_ref(
    h: Heads,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    start: usize,
    window: usize,
) -> Vec<f32> {
    let (hd, n) = (h.head_dim, q.len() / (h.n_head * h.head_dim));
    let (kv_dim, group) = (h.n_head_kv * hd, h.n_head / h.n_head_kv);
    let mut out = vec![0.0f32; n * h.n_head * hd];
    for t in 0..n {
        for hh in 0..h.n_head {
            let kvh = hh / group;
            let qr = &q[(t * h.n_head + hh) * hd..][..hd];
            let visible = start + t + 1;
            let first = if window == 0 {
                0
            } else {
                visible.saturating_sub(window)
            };
            let s: Vec<f64> = (first..visible)
                .map(|p| {
                    let kr = &k[p * kv_dim + kvh * hd..][..hd];
                    qr.iter()
                        .zip(kr)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        * f64::from(h.scale)
                })
                .map(|s| match h.softcap {
                    Some(c) => f64::from(c) * (s / f64::from(c)).tanh(),
                    None => s,
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let o: f64 = (first..visible)
                    .map(|p| e[p - first] * f64::from(v[p * kv_dim + kvh * hd + d]))
                    .sum();
                out[(t * h.n_head + hh) * hd + d] = (o / sum) as f32;
            }
        }
    }
    out
}

fn round_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

#[test]
fn attention_matches_over_f32_and_f16_caches() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(6);
    // SmolLM2-135M (9 heads, 3 kv, 64) and Qwen2.5-0.5B (14 heads, 2 kv, 64) shapes, heads of
    // 128 (Llama 3.x), and Gemma 3 270M's (4 heads, 1 kv, 256) with sliding windows of 1, 40
    // and 512 positions (the last wider than the cache).
    // Gemma 2's soft-capped scores: its cap of 50, and 0.5 (where it changes every score).
    for (nh, nkv, hd, window, softcap) in [
        (9, 3, 64, 0, None),
        (14, 2, 64, 0, None),
        (4, 2, 128, 0, None),
        (4, 1, 256, 40, None),
        (4, 1, 256, 1, None),
        (4, 1, 256, 512, None),
        (8, 4, 256, 30, Some(50.0)),
        (8, 4, 256, 0, Some(0.5)),
    ] {
        let h = Heads {
            softcap,
            ..heads(nh, nkv, hd, RopeStyle::Normal)
        };
        for (n, start) in [(1, 0), (1, 150), (7, 0), (5, 90)] {
            let total = start + n;
            let q = rng.vec(n * nh * hd, 1.0);
            let k = rng.vec(total * nkv * hd, 2.0);
            let v = rng.vec(total * nkv * hd, 1.0);
            for f16 in [false, true] {
                let got = gpu::ops::attention(&g, h, f16, &q, &k, &v, start, window).unwrap();
                let want = if f16 {
                    attention_ref(h, &q, &round_f16(&k), &round_f16(&v), start, window)
                } else {
                    attention_ref(h, &q, &k, &v, start, window)
                };
                let e = max_abs(&got, &want);
                println!(
                    "attention {nh}/{nkv} heads of {hd}, window {window}, softcap {softcap:?}, n {n} start {start} f16 {f16}: max abs error {e:.2e}"
                );
                assert!(e < 1e-5, "{e}");
            }
        }
    }
}

#[test]
fn swiglu_and_add_match() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(7);
    let a = rng.vec(4864, 4.0);
    let b = rng.vec(4864, 2.0);
    let got = gpu::ops::elementwise(&g, "swiglu", &a, &b).unwrap();
    let mut want = a.clone();
    cpu::ops::swiglu(&mut want, &b);
    let e = max_rel(&got, &want);
    println!("swiglu: max rel error {e:.2e}");
    assert!(e < 1e-6);
    let got = gpu::ops::elementwise(&g, "add", &a, &b).unwrap();
    let mut want = a.clone();
    cpu::ops::add_in_place(&mut want, &b);
    assert_eq!(got, want);
}

/// gemma's ops: GeGLU, the embedding scale, the logits' soft-capping and the per-head q/k norms,
/// against the CPU's.
#[test]
fn geglu_scale_and_head_norms_match() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(8);
    let mut a = rng.vec(2048 * 3, 6.0);
    a[..4].copy_from_slice(&[-80.0, 80.0, 0.0, -3.0]);
    let b = rng.vec(2048 * 3, 2.0);
    let got = gpu::ops::elementwise(&g, "geglu", &a, &b).unwrap();
    let mut want = a.clone();
    cpu::ops::geglu(&mut want, &b);
    let e = max_rel(&got, &want);
    println!("geglu: max rel error {e:.2e}");
    assert!(e < 1e-5, "{e}");
    let got = gpu::ops::scale(&g, &a, 640f32.sqrt()).unwrap();
    let want: Vec<f32> = a.iter().map(|v| v * 640f32.sqrt()).collect();
    assert_eq!(got, want);
    // Gemma 2's final soft-capping of the logits.
    let got = gpu::ops::softcap(&g, &a, 30.0).unwrap();
    let mut want = a.clone();
    cpu::ops::softcap(&mut want, 30.0);
    let e = max_abs(&got, &want);
    println!("softcap: max abs error {e:.2e}");
    assert!(e < 1e-5, "{e}");
    // Three tokens of 4 query heads of 256 (Gemma 3 270M), one of 1 head.
    for heads in [4, 1] {
        let x = rng.vec(3 * heads * 256, 3.0);
        let w = rng.vec(256, 2.0);
        let got = gpu::ops::heads_norm(&g, &x, &w, heads, 1e-6).unwrap();
        let mut want = x.clone();
        cpu::ops::rms_norm_in_place(&mut want, &w, 1e-6);
        let e = max_rel(&got, &want);
        println!("heads_norm {heads} heads: max rel error {e:.2e}");
        assert!(e < 1e-5, "{e}");
    }
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    let Some(g) = gpu() else { return };
    let bytes = vec![0u8; 20 * 3];
    assert!(gpu::ops::matvec(&g, GgmlType::Q4_1, &bytes, (2, 32), &[0.0; 32], None).is_err());
    assert!(gpu::ops::matvec(&g, GgmlType::F32, &[0u8; 12], (1, 3), &[0.0; 3], None).is_err());
}
