//! Mixed steps (`forward_mixed`): decode tokens and prompt chunks of several sequences in one
//! pass give each sequence's last token the bits of feeding its tokens one decode step at a
//! time, alone, with flat and paged caches; caches filled that way decode on identically; bad
//! input is an error that changes no cache.

mod common;

use common::{load, tokens};
use cpu::{CpuModel, KvCache, Logits};
use gguf::GgmlType;

fn one_at_a_time(m: &CpuModel, kv: &mut KvCache, toks: &[u32]) -> Vec<f32> {
    let mut l = Vec::new();
    for &t in toks {
        l = m.forward(&[t], kv, Logits::Last).unwrap();
    }
    l
}

#[test]
fn mixed_steps_give_the_bits_of_one_token_at_a_time() {
    for (arch, ty) in [
        ("llama", GgmlType::Q4_1),
        ("llama", GgmlType::Q8_0),
        ("qwen2", GgmlType::Q5_0),
        ("gemma3", GgmlType::Q8_0),
        ("qwen3", GgmlType::Q4_1),
        ("phi3", GgmlType::Q8_0),
    ] {
        let m = load(arch, ty);
        let pool = m.new_kv_pool(64);
        // Per sequence: tokens already in its cache, then three rounds (1 = decode, more = a
        // prompt chunk; 20 crosses a paged block).
        let plan: Vec<(Vec<u32>, [Vec<u32>; 3])> = vec![
            (tokens(5, 1), [tokens(1, 2), tokens(1, 3), tokens(1, 4)]),
            (vec![], [tokens(7, 5), tokens(1, 6), tokens(4, 7)]),
            (tokens(2, 8), [tokens(3, 9), tokens(20, 10), tokens(1, 11)]),
            (vec![], [tokens(1, 12), tokens(1, 13), tokens(9, 14)]),
        ];
        for paged in [false, true] {
            let new = |m: &CpuModel| {
                if paged {
                    KvCache::paged(&pool, 64)
                } else {
                    m.new_cache(64)
                }
            };
            let mut alone: Vec<KvCache> = plan.iter().map(|_| new(&m)).collect();
            let mut mixed: Vec<KvCache> = plan.iter().map(|_| new(&m)).collect();
            for (i, (held, _)) in plan.iter().enumerate() {
                one_at_a_time(&m, &mut alone[i], held);
                one_at_a_time(&m, &mut mixed[i], held);
            }
            for round in 0..3 {
                let want: Vec<Vec<f32>> = plan
                    .iter()
                    .zip(alone.iter_mut())
                    .map(|((_, r), kv)| one_at_a_time(&m, kv, &r[round]))
                    .collect();
                let mut seqs: Vec<(&[u32], &mut KvCache)> = plan
                    .iter()
                    .zip(mixed.iter_mut())
                    .map(|((_, r), kv)| (&r[round][..], kv))
                    .collect();
                let got = m.forward_mixed(&mut seqs).unwrap();
                let v = m.model.hp.n_vocab;
                assert_eq!(got.len(), plan.len() * v);
                for (i, w) in want.iter().enumerate() {
                    assert!(
                        got[i * v..(i + 1) * v] == w[..],
                        "{arch} {ty} paged={paged} round {round}: sequence {i} differs"
                    );
                }
            }
            let mut seqs: Vec<(u32, &mut KvCache)> = mixed.iter_mut().map(|kv| (3, kv)).collect();
            let got = m.forward_batch(&mut seqs).unwrap();
            let v = m.model.hp.n_vocab;
            for (i, kv) in alone.iter_mut().enumerate() {
                let w = m.forward(&[3], kv, Logits::Last).unwrap();
                assert!(
                    got[i * v..(i + 1) * v] == w[..],
                    "{arch} {ty}: decode after mixed steps"
                );
            }
        }
    }
}

#[test]
fn bad_mixed_input_is_an_error_and_changes_no_cache() {
    let m = load("llama", GgmlType::Q8_0);
    let mut a = m.new_cache(8);
    let mut b = m.new_cache(8);
    m.forward(&[1, 2, 3], &mut a, Logits::Last).unwrap();
    // Too long for a's capacity, an id past the vocabulary, an empty chunk, nothing at all.
    let long = tokens(6, 1);
    assert!(
        m.forward_mixed(&mut [(&[4][..], &mut b), (&long[..], &mut a)])
            .is_err()
    );
    assert!(m.forward_mixed(&mut [(&[4, 99_999][..], &mut b)]).is_err());
    assert!(m.forward_mixed(&mut [(&[][..], &mut b)]).is_err());
    assert!(m.forward_mixed(&mut []).is_err());
    assert_eq!((a.len, b.len), (3, 0));
}
