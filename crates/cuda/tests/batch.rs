//! Batched decode (`CudaModel::forward_batch`, the server's continuous batching on CUDA): each
//! sequence's logits have the bits a decode step of that sequence alone gives, whatever the
//! batch around it (sizes, positions, sequences joining and leaving), and speed at 1..64
//! sequences (ignored by default: `--ignored batch_speed`).

mod common;

use common::{Rng, argmax, gpu, load, small_spec};
use cpu::Logits;
use cuda::{CudaKvCache, CudaModel};
use gguf::GgmlType;
use model::synth::SynthSpec;
use std::time::Instant;

fn spec(arch: &'static str, ty: GgmlType, n_embd: usize, n_ff: usize) -> SynthSpec {
    small_spec(arch, ty, n_embd, n_ff, 2, 17)
}

/// Sequences with prompts of different lengths, decoded greedily: once each on its own and once
/// in batches whose membership changes every step (a sequence sits out every third step).
#[test]
fn batched_decode_gives_each_sequence_the_bits_it_gets_alone() {
    let Some(_) = gpu() else { return };
    for s in [
        spec("llama", GgmlType::Q8_0, 576, 1536),
        spec("llama", GgmlType::Q4_1, 576, 1536),
        spec("llama", GgmlType::Q4_K, 512, 1536),
        spec("llama", GgmlType::Q6_K, 512, 1536),
        spec("llama", GgmlType::F16, 576, 1536),
        spec("qwen2", GgmlType::Q5_0, 896, 4864),
        // Windows of 4 positions, post-norms, GeGLU, soft-caps, scaled branches.
        spec("gemma3", GgmlType::Q8_0, 512, 1536),
        spec("gemma2", GgmlType::Q4_K, 512, 1536),
        spec("granite", GgmlType::Q8_0, 576, 1536),
    ] {
        let m = load(&s);
        let tag = format!("{} {}", s.arch, s.ty);
        let mut rng = Rng::new(3);
        const SEQS: usize = 19;
        let prompts: Vec<Vec<u32>> = (0..SEQS)
            .map(|i| {
                (0..1 + 5 * i)
                    .map(|_| rng.below(s.n_vocab) as u32)
                    .collect()
            })
            .collect();
        let start = |m: &CudaModel| -> (Vec<CudaKvCache>, Vec<u32>) {
            let mut caches = Vec::new();
            let mut next = Vec::new();
            for p in &prompts {
                let mut kv = m.new_cache(128).unwrap();
                next.push(argmax(&m.forward(p, &mut kv, Logits::Last).unwrap()));
                caches.push(kv);
            }
            (caches, next)
        };
        let (mut alone, mut next_a) = start(&m);
        let (mut batched, mut next_b) = start(&m);
        assert_eq!(next_a, next_b, "{tag}: prefill differs");
        for step in 0..9 {
            let active: Vec<usize> = (0..SEQS).filter(|i| (i + step) % 3 != 0).collect();
            let mut want = Vec::new();
            for &i in &active {
                let l = m
                    .forward(&[next_a[i]], &mut alone[i], Logits::Last)
                    .unwrap();
                next_a[i] = argmax(&l);
                want.push(l);
            }
            let mut seqs: Vec<(u32, &mut CudaKvCache)> = batched
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| active.contains(i))
                .map(|(i, kv)| (next_b[i], kv))
                .collect();
            let got = m.forward_batch(&mut seqs).unwrap();
            let vocab = s.n_vocab;
            assert_eq!(got.len(), active.len() * vocab);
            for (j, &i) in active.iter().enumerate() {
                let row = &got[j * vocab..(j + 1) * vocab];
                assert!(
                    row == want[j].as_slice(),
                    "{tag} step {step}: sequence {i} (position {}) differs from decoding alone",
                    alone[i].len
                );
                next_b[i] = argmax(row);
            }
        }
        for (a, b) in alone.iter().zip(&batched) {
            assert_eq!(a.len, b.len);
        }
        println!("{tag}: 9 batched steps of 12-13 sequences, bit-identical to decoding alone");
    }
}

/// A mixed step (decode tokens and prompt chunks of several sequences in one pass) gives each
/// sequence's last token the bits of feeding its tokens one decode step at a time, alone; the
/// caches it fills decode on as if filled that way.
#[test]
fn mixed_steps_give_the_bits_of_one_token_at_a_time() {
    let Some(_) = gpu() else { return };
    for s in [
        spec("llama", GgmlType::Q4_1, 576, 1536),
        spec("llama", GgmlType::Q4_K, 512, 1536),
        spec("qwen2", GgmlType::Q5_0, 896, 4864),
    ] {
        let m = load(&s);
        let tag = format!("{} {}", s.arch, s.ty);
        let mut rng = Rng::new(11);
        let mut toks =
            |n: usize| -> Vec<u32> { (0..n).map(|_| rng.below(s.n_vocab) as u32).collect() };
        // Per sequence: what its cache holds first (one token at a time), then the rounds of
        // tokens it is fed in mixed steps (1 = decode, more = a prompt chunk).
        let plan: Vec<(Vec<u32>, Vec<Vec<u32>>)> = vec![
            (toks(5), vec![toks(1), toks(1), toks(1)]),
            (vec![], vec![toks(7), toks(1), toks(4)]),
            (toks(2), vec![toks(3), toks(9), toks(1)]),
            (vec![], vec![toks(1), toks(1), toks(16)]),
        ];
        let one_at_a_time = |kv: &mut CudaKvCache, t: &[u32]| -> Vec<f32> {
            let mut l = Vec::new();
            for &id in t {
                l = m.forward(&[id], kv, Logits::Last).unwrap();
            }
            l
        };
        let mut alone: Vec<CudaKvCache> = Vec::new();
        let mut mixed: Vec<CudaKvCache> = Vec::new();
        for (held, _) in &plan {
            let (mut a, mut b) = (m.new_cache(64).unwrap(), m.new_cache(64).unwrap());
            one_at_a_time(&mut a, held);
            one_at_a_time(&mut b, held);
            alone.push(a);
            mixed.push(b);
        }
        for round in 0..3 {
            let want: Vec<Vec<f32>> = plan
                .iter()
                .zip(alone.iter_mut())
                .map(|((_, r), kv)| one_at_a_time(kv, &r[round]))
                .collect();
            let mut seqs: Vec<(&[u32], &mut CudaKvCache)> = plan
                .iter()
                .zip(mixed.iter_mut())
                .map(|((_, r), kv)| (&r[round][..], kv))
                .collect();
            let got = m.forward_mixed_with(&mut seqs, <[f32]>::to_vec).unwrap();
            let vocab = s.n_vocab;
            assert_eq!(got.len(), plan.len() * vocab);
            for (i, w) in want.iter().enumerate() {
                assert!(
                    &got[i * vocab..(i + 1) * vocab] == w.as_slice(),
                    "{tag} round {round}: sequence {i} differs from one token at a time"
                );
            }
        }
        for (a, b) in alone.iter().zip(&mixed) {
            assert_eq!(a.len, b.len);
        }
        // The caches filled by mixed steps decode on with the same bits.
        let mut seqs: Vec<(u32, &mut CudaKvCache)> = mixed.iter_mut().map(|kv| (3, kv)).collect();
        let got = m.forward_batch(&mut seqs).unwrap();
        for (i, kv) in alone.iter_mut().enumerate() {
            let w = m.forward(&[3], kv, Logits::Last).unwrap();
            assert!(
                got[i * s.n_vocab..(i + 1) * s.n_vocab] == w[..],
                "{tag}: decode after mixed steps, sequence {i}"
            );
        }
        println!("{tag}: mixed steps bit-identical to one token at a time");
    }
}

#[test]
fn batch_refuses_a_full_cache_and_a_foreign_one() {
    let Some(_) = gpu() else { return };
    let s = spec("llama", GgmlType::Q8_0, 576, 1536);
    let (m, other) = (load(&s), load(&s));
    let mut a = m.new_cache(4).unwrap();
    let mut b = m.new_cache(4).unwrap();
    m.forward(&[1, 2, 3, 4], &mut a, Logits::Last).unwrap();
    assert!(m.forward_batch(&mut [(1, &mut a), (2, &mut b)]).is_err());
    let mut c = other.new_cache(4).unwrap();
    let mut d = m.new_cache(4).unwrap();
    assert!(m.forward_batch(&mut [(1, &mut c), (2, &mut d)]).is_err());
    assert!(
        m.forward_batch(&mut [(99_999, &mut d), (2, &mut b)])
            .is_err()
    );
    // Mixed steps: a chunk past the capacity, an empty one, an id past the vocabulary.
    let mixed = |seqs: &mut [(&[u32], &mut CudaKvCache)]| m.forward_mixed_with(seqs, |_| ());
    assert!(mixed(&mut [(&[1][..], &mut b), (&[1, 2, 3, 4, 5][..], &mut d)]).is_err());
    assert!(mixed(&mut [(&[1][..], &mut b), (&[][..], &mut d)]).is_err());
    assert!(mixed(&mut [(&[1, 99_999][..], &mut b)]).is_err());
    assert_eq!((b.len, d.len), (0, 0), "a refused batch changes no cache");
    assert!(m.forward_batch(&mut []).unwrap().is_empty());
}

/// Aggregate decode speed of `forward_batch_with` (logits left where they land, as the server
/// reads them) at 1..64 sequences (SmolLM2's shapes, Q4_1), with the step replayed as a CUDA
/// graph and launched kernel by kernel.
#[test]
#[ignore]
fn batch_speed() {
    let Some(_) = gpu() else { return };
    let s = SynthSpec::smollm2(GgmlType::Q4_1);
    let m = load(&s);
    println!(
        "| sequences | step ms (graph) | tok/s (graph) | step ms (launches) | tok/s (launches) |"
    );
    println!("| --- | --- | --- | --- | --- |");
    // MOLLA_BATCH_SIZES="64" (say) for a profiler run of one size.
    let sizes: Vec<usize> = std::env::var("MOLLA_BATCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 16, 64]);
    for n in sizes {
        let mut row = format!("| {n} |");
        for graphs in [true, false] {
            m.set_graphs(graphs);
            let mut caches: Vec<CudaKvCache> = (0..n).map(|_| m.new_cache(512).unwrap()).collect();
            for kv in caches.iter_mut() {
                m.forward(&[1, 2, 3, 4, 5, 6, 7, 8], kv, Logits::Last)
                    .unwrap();
            }
            let mut step = |step: usize| {
                let mut seqs: Vec<(u32, &mut CudaKvCache)> = caches
                    .iter_mut()
                    .enumerate()
                    .map(|(i, kv)| (((step * 31 + i * 7) % s.n_vocab) as u32, kv))
                    .collect();
                m.forward_batch_with(&mut seqs, |_| ()).unwrap();
            };
            step(0); // the capture
            let steps = 64;
            let t = Instant::now();
            for i in 1..=steps {
                step(i);
            }
            let dt = t.elapsed().as_secs_f64() / steps as f64;
            row += &format!(" {:.2} | {:.0} |", dt * 1e3, n as f64 / dt);
        }
        println!("{row}");
    }
    m.set_graphs(true);
}
