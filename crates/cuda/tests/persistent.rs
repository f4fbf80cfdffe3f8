//! The persistent decode kernel (one launch a token): the same bits as the graph-replayed and
//! plainly launched paths, one launch a token whatever the layer count, and a long run with no
//! hang and no divergence. Under `MOLLA_KDEFS=FUSEQKV` (an experiment: q/k/v made in the down step
//! before, from a product matrix, crates/cuda/src/fused.rs) the persistent path is held to the
//! graph path's logits as the model suite holds CUDA to the CPU (`compare_logits`: the same
//! argmax, the top 16's log-probs within 0.02), instead of its bits.

mod common;

use common::{Rng, argmax, gpu, load, small_spec};
use cpu::Logits;
use cpu::conformance::compare_logits;
use cuda::CudaModel;
use gguf::GgmlType;
use model::synth::SynthSpec;

fn spec(arch: &'static str, ty: GgmlType, n_embd: usize, n_ff: usize, n_layer: usize) -> SynthSpec {
    small_spec(arch, ty, n_embd, n_ff, n_layer, 31)
}

/// Whether the kernels are built for fused q/k/v (`MOLLA_KDEFS=FUSEQKV`): then persistent decode
/// is near the graph path, not the same bits.
fn fused() -> bool {
    std::env::var("MOLLA_KDEFS").is_ok_and(|v| v.split([',', ' ']).any(|d| d == "FUSEQKV"))
}

/// Whether decode path `p` (`decode_path()`) is the fused q/k/v kernel's.
fn fused_path(p: &str) -> bool {
    p.contains("fused q/k/v")
}

#[derive(Clone, Copy)]
enum Path {
    Persistent,
    Graph,
    Plain,
}

fn set(m: &CudaModel, p: Path) {
    m.set_persistent(matches!(p, Path::Persistent));
    m.set_graphs(matches!(p, Path::Graph | Path::Persistent));
}

#[test]
fn persistent_graph_and_plain_decode_give_the_same_bits() {
    let Some(_) = gpu() else { return };
    for s in [
        spec("llama", GgmlType::Q8_0, 576, 1536, 3),
        spec("llama", GgmlType::Q4_1, 576, 1536, 2),
        spec("llama", GgmlType::Q4_K, 512, 1536, 2),
        spec("llama", GgmlType::Q6_K, 512, 1536, 2),
        spec("qwen2", GgmlType::Q5_0, 896, 4864, 2),
    ] {
        let m = load(&s);
        let tag = format!("{} {} {}L", s.arch, s.ty, s.n_layer);
        let mut rng = Rng::new(7);
        let prompt: Vec<u32> = (0..9).map(|_| rng.below(s.n_vocab) as u32).collect();
        let paths = [Path::Persistent, Path::Graph, Path::Plain];
        let mut caches: Vec<_> = paths.iter().map(|_| m.new_cache(64).unwrap()).collect();
        let mut last = Vec::new();
        for (p, kv) in paths.iter().zip(caches.iter_mut()) {
            set(&m, *p);
            last.push(m.forward(&prompt, kv, Logits::Last).unwrap());
        }
        let mut next = argmax(&last[0]);
        for step in 0..12 {
            let mut outs = Vec::new();
            let mut is_fused = false;
            for (p, kv) in paths.iter().zip(caches.iter_mut()) {
                set(&m, *p);
                outs.push(m.forward(&[next], kv, Logits::Last).unwrap());
                if matches!(p, Path::Persistent) {
                    let path = m.decode_path();
                    assert!(
                        path.starts_with("persistent"),
                        "{tag}: decode ran as {path}"
                    );
                    is_fused = fused_path(&path);
                }
            }
            if fused() && is_fused {
                // The criterion (top-1, top-16 log-probs within 0.02), the model suite's.
                let what = format!("{tag} step {step}: fused persistent against graph");
                compare_logits(&what, &outs[0], &outs[1]);
            } else {
                assert!(
                    outs[0] == outs[1],
                    "{tag} step {step}: persistent differs from graph"
                );
            }
            assert!(
                outs[1] == outs[2],
                "{tag} step {step}: graph differs from plain"
            );
            next = argmax(&outs[0]);
        }
        set(&m, Path::Persistent);
        println!(
            "{tag}: 12 steps, identical on all three paths ({})",
            m.decode_path()
        );
    }
}

#[test]
fn one_launch_a_token_whatever_the_layer_count() {
    let Some(_) = gpu() else { return };
    for layers in [2, 6] {
        let m = load(&spec("llama", GgmlType::Q8_0, 576, 1536, layers));
        let mut kv = m.new_cache(32).unwrap();
        m.forward(&[1, 2, 3], &mut kv, Logits::Last).unwrap();
        m.forward(&[4], &mut kv, Logits::Last).unwrap(); // builds the step list
        let before = cuda::testing::launch_count();
        for t in 0..5 {
            m.forward(&[5 + t], &mut kv, Logits::Last).unwrap();
        }
        let launches = cuda::testing::launch_count() - before;
        // A head after the kernel (MOLLA_PK_HEAD=wide; this model's is too small to go there by
        // default) adds its two launches.
        let outside = m.decode_path().contains("head on matvec_wide");
        let wide = std::env::var("MOLLA_PK_HEAD").is_ok_and(|v| v == "wide");
        assert_eq!(outside, wide, "{}", m.decode_path());
        let per_token = if outside { 3 } else { 1 };
        assert_eq!(
            launches,
            5 * per_token,
            "{layers} layers: {launches} launches for 5 tokens ({})",
            m.decode_path()
        );
        println!("{layers} layers: 1 launch a token ({})", m.decode_path());
    }
}

/// 10,000 greedy decode steps on the persistent path and on the graph path: the same tokens and
/// the same logits at every step, and no hang (a hang would time out inside the kernel and turn
/// the persistent path off, which the test would see).
#[test]
fn ten_thousand_steps_without_hang_or_divergence() {
    let Some(_) = gpu() else { return };
    const STEPS: usize = 10_000;
    let m = load(&spec("llama", GgmlType::Q4_1, 576, 1536, 4));
    // The persistent kernel at every position (by default decode leaves it for the graph path
    // past PK_MAX_POS), so that it runs over a cache of ten tiles against the graph path's split.
    m.set_persistent_max_pos(usize::MAX);
    let run = |p: Path| {
        set(&m, p);
        let mut kv = m.new_cache(STEPS + 1).unwrap();
        let mut next = 1u32;
        let mut out = Vec::with_capacity(STEPS);
        for _ in 0..STEPS {
            let l = m.forward(&[next], &mut kv, Logits::Last).unwrap();
            next = argmax(&l);
            out.push((
                next,
                l.iter()
                    .fold(0u64, |h, v| h.rotate_left(5) ^ u64::from(v.to_bits())),
            ));
        }
        out
    };
    if fused() {
        // Fused q/k/v: both paths fed the persistent path's tokens, each step's logits compared.
        let mut kv = [
            m.new_cache(STEPS + 1).unwrap(),
            m.new_cache(STEPS + 1).unwrap(),
        ];
        let (mut next, mut worst) = (1u32, 0f64);
        for i in 0..STEPS {
            set(&m, Path::Persistent);
            let a = m.forward(&[next], &mut kv[0], Logits::Last).unwrap();
            set(&m, Path::Graph);
            let b = m.forward(&[next], &mut kv[1], Logits::Last).unwrap();
            let w = compare_logits(&format!("step {i}: fused persistent against graph"), &a, &b);
            worst = worst.max(w);
            next = argmax(&a);
        }
        set(&m, Path::Persistent);
        assert!(fused_path(&m.decode_path()), "{}", m.decode_path());
        println!("{STEPS} steps, fused q/k/v: within {worst:.2e} of the graph path");
        return;
    }
    let t = std::time::Instant::now();
    let a = run(Path::Persistent);
    let ta = t.elapsed();
    assert!(
        m.decode_path().starts_with("persistent"),
        "{}",
        m.decode_path()
    );
    let t = std::time::Instant::now();
    let b = run(Path::Graph);
    let tb = t.elapsed();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "step {i}: persistent and graph paths diverge");
    }
    println!(
        "{STEPS} steps: persistent {:.1} s, graph {:.1} s, identical",
        ta.as_secs_f64(),
        tb.as_secs_f64()
    );
}

/// Past its maximum position decode leaves the persistent kernel for the graph path (whose
/// attention splits a long cache over several blocks a head): the same bits as the graph path
/// throughout, across the hand-over and past the first attention tile.
#[test]
fn persistent_hands_over_to_the_graph_at_its_max_position() {
    let Some(_) = gpu() else { return };
    let s = spec("llama", GgmlType::Q4_1, 576, 1536, 2);
    let m = load(&s);
    let prompt: Vec<u32> = (0..1000).map(|i| (i * 37 % s.n_vocab) as u32).collect();
    let run = |p: Path, max: usize| {
        set(&m, p);
        m.set_persistent_max_pos(max);
        let mut kv = m.new_cache(2100).unwrap();
        let mut l = m.forward(&prompt, &mut kv, Logits::Last).unwrap();
        let mut out = Vec::new();
        for _ in 0..60 {
            l = m.forward(&[argmax(&l)], &mut kv, Logits::Last).unwrap();
            out.push(l.clone());
        }
        (out, m.decode_path())
    };
    let (a, path) = run(Path::Persistent, 1030);
    assert!(path.contains("graph from position 1030"), "{path}");
    let (b, _) = run(Path::Graph, cuda::PK_MAX_POS);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if fused() {
            // The fused steps' cache entries are near the graph path's, not the same bits.
            compare_logits(&format!("step {i}: fused hand-over against graph"), x, y);
            continue;
        }
        assert!(
            x == y,
            "step {i} (position {}): hand-over differs from graph",
            1000 + i
        );
    }
    m.set_persistent_max_pos(cuda::PK_MAX_POS);
    println!(
        "persistent to position 1030, then graph: the graph path's bits over 60 steps ({path})"
    );
}
