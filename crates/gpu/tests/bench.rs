//! Speed on synthetic models of SmolLM2-135M's shapes (30 layers, tied head, Q4_1) and
//! Qwen2.5-0.5B's (24 layers, biases, NeoX, Q8_0):
//! prefill and decode tokens/s. Ignored by default; run with
//! `cargo test -p gpu --release --test bench -- --ignored --nocapture` on a machine with a GPU.
//! `MOLLA_BENCH_SHAPE=smollm2|qwen` picks one shape (both by default); `MOLLA_BENCH_LAYERS=N`
//! keeps N layers; `MOLLA_BENCH_PP=N` prompts N tokens (512).

mod common;

use common::gpu;
use cpu::Logits;
use gguf::{GgmlType, GgufFile};
use gpu::GpuModel;
use model::Model;
use model::synth::{SynthSpec, build};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn shape(name: &str) -> SynthSpec {
    if name == "qwen" {
        SynthSpec::qwen2_0_5b(GgmlType::Q8_0)
    } else {
        SynthSpec::smollm2(GgmlType::Q4_1)
    }
}

#[test]
#[ignore]
fn prefill_and_decode_speed() {
    let Some(g) = gpu() else { return };
    let name = g.name();
    let shapes = match std::env::var("MOLLA_BENCH_SHAPE") {
        Ok(s) => vec![s],
        Err(_) => vec!["smollm2".to_string(), "qwen".to_string()],
    };
    let mut g = Some(g);
    for s in shapes {
        let mut spec = shape(&s);
        // MOLLA_BENCH_LAYERS=N: fewer layers, to split per-step from per-layer costs.
        if let Some(n) = std::env::var("MOLLA_BENCH_LAYERS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            spec.n_layer = n;
        }
        let m = Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap();
        let dev = match g.take() {
            Some(d) => d,
            None => gpu::Gpu::new().unwrap(),
        };
        let t0 = Instant::now();
        let gm = GpuModel::with_gpu(dev, &m).unwrap();
        let load = t0.elapsed().as_secs_f64();
        let pp: usize = std::env::var("MOLLA_BENCH_PP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(512);
        let (tg, reps) = (128usize, 3);
        let prompt: Vec<u32> = (0..pp as u32)
            .map(|i| (i * 7919) % spec.n_vocab as u32)
            .collect();
        let (mut pps, mut tgs) = (Vec::new(), Vec::new());
        for r in 0..=reps {
            let mut kv = gm.new_cache(pp + tg).unwrap();
            let t = Instant::now();
            gm.forward(&prompt, &mut kv, Logits::Last).unwrap();
            let pp_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut next = 1u32;
            for _ in 0..tg {
                let l = gm.forward(&[next], &mut kv, Logits::Last).unwrap();
                next = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as u32;
            }
            let tg_s = t.elapsed().as_secs_f64();
            if r > 0 {
                // the first run compiles the pipelines
                pps.push(pp as f64 / pp_s);
                tgs.push(tg as f64 / tg_s);
            }
        }
        println!(
            "{{\"device\":\"{name}\",\"shape\":\"{s}\",\"layers\":{},\"type\":\"{}\",\"load_s\":{load:.2},\"pp{pp}_tok_s\":{:.1},\"tg{tg}_tok_s\":{:.1},\"tg_ms\":{:.3}}}",
            spec.n_layer,
            spec.ty,
            median(pps),
            median(tgs.clone()),
            1000.0 / median(tgs),
        );
    }
}
