//! Speed on a synthetic SmolLM2-135M-shaped model (30 layers, tied head): prefill tokens/s and
//! decode tokens/s with and without CUDA-graph replay. Ignored by default; run with
//! `--ignored --nocapture` on a GPU machine.

mod common;

use common::gpu;
use cpu::Logits;
use cuda::CudaModel;
use gguf::{GgmlType, GgufFile};
use model::Model;
use model::synth::{SynthSpec, build};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore]
fn smollm2_speed() {
    let Some(_) = gpu() else { return };
    let mut rows = Vec::new();
    for ty in [GgmlType::Q8_0, GgmlType::Q4_1] {
        let spec = SynthSpec {
            arch: "llama",
            n_vocab: 49152,
            n_embd: 576,
            n_layer: 30,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            ty,
            tied: true,
            seed: 5,
        };
        let t0 = Instant::now();
        let m = Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap();
        let t1 = Instant::now();
        let cuda = CudaModel::new(&m, 0).unwrap();
        println!(
            "{ty}: synth {:.1}s, upload+kernels {:.2}s",
            (t1 - t0).as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        let prompt: Vec<u32> = (0..512).map(|i| (i * 97 % 49152) as u32).collect();
        let mut pp = Vec::new();
        for _ in 0..4 {
            let mut kv = cuda.new_cache(1024).unwrap();
            let t = Instant::now();
            cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
            pp.push(512.0 / t.elapsed().as_secs_f64());
        }
        pp.remove(0);
        let mut tg = [0.0f64; 2];
        for (i, graphs) in [true, false].into_iter().enumerate() {
            cuda.set_graphs(graphs);
            let mut reps = Vec::new();
            for _ in 0..3 {
                let mut kv = cuda.new_cache(1024).unwrap();
                cuda.forward(&prompt[..16], &mut kv, Logits::Last).unwrap();
                cuda.forward(&[1], &mut kv, Logits::Last).unwrap(); // captures the graph
                let t = Instant::now();
                for s in 0..128u32 {
                    cuda.forward(&[s * 31 % 49152], &mut kv, Logits::Last)
                        .unwrap();
                }
                reps.push(128.0 / t.elapsed().as_secs_f64());
            }
            tg[i] = median(reps);
        }
        rows.push(format!(
            "| SmolLM2-shaped {ty} | {:.0} | {:.0} | {:.0} |",
            median(pp),
            tg[0],
            tg[1]
        ));
    }
    println!(
        "device: {}",
        CudaModel::new(
            &Model::from_file(
                GgufFile::from_bytes(build(&SynthSpec::tiny("llama")).unwrap()).unwrap()
            )
            .unwrap(),
            0
        )
        .unwrap()
        .device_name()
    );
    println!("| model | pp512 tok/s | tg128 tok/s (graph) | tg128 tok/s (no graph) |");
    println!("| --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
}

/// One decode step with plain launches, for a profiler: a 30-layer SmolLM2-shaped Q8_0 model,
/// 100-token prefill (362 launches), then 3 decode steps (182 launches each).
#[test]
#[ignore]
fn profile_decode() {
    let Some(_) = gpu() else { return };
    let spec = SynthSpec {
        arch: "llama",
        n_vocab: 49152,
        n_embd: 576,
        n_layer: 30,
        n_ff: 1536,
        n_head: 9,
        n_head_kv: 3,
        ty: GgmlType::Q8_0,
        tied: true,
        seed: 5,
    };
    let m = Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap();
    let cuda = CudaModel::new(&m, 0).unwrap();
    cuda.set_graphs(false);
    let mut kv = cuda.new_cache(256).unwrap();
    let prompt: Vec<u32> = (0..100).map(|i| i * 7).collect();
    cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
    for t in 0..3 {
        cuda.forward(&[t], &mut kv, Logits::Last).unwrap();
    }
}
