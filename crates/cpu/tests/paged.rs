//! Paged KV caches (blocks from a shared pool): the same bits as a flat cache in prefill,
//! decode and batched decode, across block boundaries and with both element types; blocks are
//! taken as a cache grows and given back when it is truncated, cleared or dropped; an
//! exhausted pool is an error that leaves the cache as it was.

mod common;

use common::{load, tokens};
use cpu::{BLOCK_POSITIONS, CacheType, CpuError, CpuModel, KvCache, KvPool, Logits};
use gguf::{GgmlType, GgufFile};
use model::Model;
use model::synth::{SynthSpec, build};

#[test]
fn paged_gives_the_bits_of_flat() {
    for (arch, ty, cache) in [
        ("llama", GgmlType::Q8_0, CacheType::F32),
        ("qwen2", GgmlType::Q4_1, CacheType::F16),
        ("gemma3", GgmlType::Q8_0, CacheType::F32),
    ] {
        let mut m = load(arch, ty);
        m.set_cache_type(cache);
        let pool = m.new_kv_pool(64);
        // A 37-token prompt in chunks of 5 (chunks and blocks cross at different places),
        // then 20 decode steps.
        let prompt = tokens(37, 1);
        let mut flat = m.new_cache(96);
        let mut paged = KvCache::paged(&pool, 96);
        for c in prompt.chunks(5) {
            let a = m.forward(c, &mut flat, Logits::All).unwrap();
            let b = m.forward(c, &mut paged, Logits::All).unwrap();
            assert_eq!(a, b, "{arch} {ty:?} {cache:?}: prefill chunk");
        }
        assert_eq!(paged.blocks(), 37usize.div_ceil(BLOCK_POSITIONS));
        for t in 0..20 {
            let a = m.forward(&[t * 3 + 2], &mut flat, Logits::Last).unwrap();
            let b = m.forward(&[t * 3 + 2], &mut paged, Logits::Last).unwrap();
            assert_eq!(a, b, "{arch} {ty:?} {cache:?}: decode step {t}");
        }
        // Batched decode: two paged sequences and a flat one together equal each alone.
        let mut p1 = KvCache::paged(&pool, 96);
        let mut p2 = KvCache::paged(&pool, 96);
        m.forward(&tokens(15, 2), &mut p1, Logits::Last).unwrap();
        m.forward(&tokens(33, 3), &mut p2, Logits::Last).unwrap();
        let mut f1 = m.new_cache(96);
        let mut f2 = m.new_cache(96);
        m.forward(&tokens(15, 2), &mut f1, Logits::Last).unwrap();
        m.forward(&tokens(33, 3), &mut f2, Logits::Last).unwrap();
        for step in 0..3u32 {
            let batch = m
                .forward_batch(&mut [(step + 5, &mut p1), (step + 9, &mut flat), (step, &mut p2)])
                .unwrap();
            let n = m.model.hp.n_vocab;
            let a1 = m.forward(&[step + 5], &mut f1, Logits::Last).unwrap();
            let a2 = m.forward(&[step], &mut f2, Logits::Last).unwrap();
            assert_eq!(&batch[..n], &a1[..], "batched paged row 0, step {step}");
            assert_eq!(&batch[2 * n..], &a2[..], "batched paged row 2, step {step}");
        }
        // Positions 15 and 16 (crossing into a new block) came out of the batch.
        assert_eq!(p1.blocks(), 2);
    }
}

#[test]
fn blocks_come_and_go_with_the_positions() {
    let m = load("llama", GgmlType::Q8_0);
    let pool = m.new_kv_pool(8);
    assert_eq!((pool.total(), pool.used()), (8, 0));
    let mut a = KvCache::paged(&pool, 1000);
    m.forward(&tokens(40, 1), &mut a, Logits::Last).unwrap();
    assert_eq!((a.blocks(), pool.used()), (3, 3));
    a.truncate(16);
    assert_eq!((a.len, a.blocks(), pool.used()), (16, 1, 1));
    a.truncate(17); // never grows
    assert_eq!(a.len, 16);
    // The kept positions are intact: continuing gives the bits of a fresh run.
    let after = m.forward(&tokens(5, 9), &mut a, Logits::Last).unwrap();
    let mut fresh = m.new_cache(64);
    m.forward(&tokens(40, 1)[..16], &mut fresh, Logits::Last)
        .unwrap();
    assert_eq!(
        after,
        m.forward(&tokens(5, 9), &mut fresh, Logits::Last).unwrap()
    );
    {
        let mut b = KvCache::paged(&pool, 1000);
        m.forward(&tokens(30, 2), &mut b, Logits::Last).unwrap();
        assert_eq!(pool.used(), 2 + 2);
    }
    assert_eq!(pool.used(), 2, "a dropped cache gives its blocks back");
    a.clear();
    assert_eq!((a.len, pool.used()), (0, 0));
    assert_eq!(KvPool::blocks_for(0), 0);
    assert_eq!(KvPool::blocks_for(BLOCK_POSITIONS + 1), 2);
}

#[test]
fn an_exhausted_pool_is_an_error_not_a_panic() {
    let m = load("llama", GgmlType::Q8_0);
    let pool = m.new_kv_pool(2);
    let mut a = KvCache::paged(&pool, 1000);
    m.forward(&tokens(20, 1), &mut a, Logits::Last).unwrap();
    let mut b = KvCache::paged(&pool, 1000);
    let err = m.forward(&tokens(5, 2), &mut b, Logits::Last).unwrap_err();
    assert!(matches!(err, CpuError::KvPoolFull { total: 2 }), "{err}");
    assert_eq!(b.len, 0);
    // Also inside a batch; the cache that did fit is unchanged too.
    let len = a.len;
    let err = m
        .forward_batch(&mut [(1, &mut a), (2, &mut b)])
        .unwrap_err();
    assert!(matches!(err, CpuError::KvPoolFull { .. }), "{err}");
    assert_eq!((a.len, b.len), (len, 0));
    // Freed blocks serve the next one.
    drop(a);
    m.forward(&tokens(5, 2), &mut b, Logits::Last).unwrap();
    assert_eq!(b.len, 5);
    // A pool for another shape is refused like a foreign flat cache.
    let mut spec = SynthSpec::tiny("llama");
    spec.n_layer += 1;
    let other = CpuModel::new(
        Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap(),
    );
    let mut c = KvCache::paged(&pool, 100);
    assert!(matches!(
        other.forward(&[1], &mut c, Logits::Last),
        Err(CpuError::CacheShape)
    ));
}

/// Two caches share a prefix's blocks: the sharer continues with the bits of a fresh run, the
/// source is not disturbed by the sharer's writes, a shared block counts once in the pool and
/// outlives the cache that made it, and a truncation inside a shared block keeps only the
/// whole blocks before it.
#[test]
fn shared_prefix_blocks() {
    let m = load("llama", GgmlType::Q8_0);
    let pool = m.new_kv_pool(16);
    let prompt = tokens(40, 5);
    let fresh = |upto: usize, more: &[u32]| {
        let mut kv = m.new_cache(128);
        for c in prompt[..upto].chunks(16) {
            m.forward(c, &mut kv, Logits::Last).unwrap();
        }
        m.forward(more, &mut kv, Logits::All).unwrap()
    };
    let mut a = KvCache::paged(&pool, 128);
    for c in prompt.chunks(16) {
        m.forward(c, &mut a, Logits::Last).unwrap();
    }
    assert_eq!(pool.used(), 3);
    let mut b = KvCache::paged(&pool, 128);
    assert!(!b.share_prefix(&a, 20), "not whole blocks");
    assert!(!b.share_prefix(&a, 48), "more than a holds");
    assert!(b.share_prefix(&a, 32));
    assert_eq!((b.len, b.blocks(), pool.used()), (32, 2, 3));
    let tail = [7u32, 8, 9, 10, 11];
    let got = m.forward(&tail, &mut b, Logits::All).unwrap();
    assert_eq!(got, fresh(32, &tail), "the sharer continues as a fresh run");
    assert_eq!(pool.used(), 4);
    // a's own positions 32..40 were not touched by b's writes at 32..37.
    let a_next = m.forward(&[3, 4], &mut a, Logits::All).unwrap();
    let mut whole = m.new_cache(128);
    for c in prompt.chunks(16) {
        m.forward(c, &mut whole, Logits::Last).unwrap();
    }
    assert_eq!(a_next, m.forward(&[3, 4], &mut whole, Logits::All).unwrap());
    // The shared blocks outlive a; b's truncation into a shared block stops at its start.
    drop(a);
    assert_eq!(pool.used(), 3, "b's two shared blocks and its own third");
    let mut c = KvCache::paged(&pool, 128);
    assert!(c.share_prefix(&b, 32));
    b.truncate(20);
    assert_eq!(
        b.len, 16,
        "block 1 is shared with c: kept only whole blocks"
    );
    let got = m.forward(&prompt[16..32], &mut b, Logits::Last).unwrap();
    let want = {
        let mut kv = m.new_cache(128);
        m.forward(&prompt[..16], &mut kv, Logits::Last).unwrap();
        m.forward(&prompt[16..32], &mut kv, Logits::Last).unwrap()
    };
    assert_eq!(got, want);
    // A flat cache or another pool's cache cannot be shared from.
    let other = m.new_kv_pool(4);
    let mut d = KvCache::paged(&other, 128);
    assert!(!d.share_prefix(&c, 16));
    let flat = m.new_cache(64);
    assert!(!d.share_prefix(&flat, 0) || d.len == 0);
}

/// Decode speed with a flat and a paged cache after a long prompt, on the model at
/// `MOLLA_MODEL` (ignored: a measurement, `cargo test --release -p cpu --test paged -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn paged_decode_speed() {
    let Ok(path) = std::env::var("MOLLA_MODEL") else {
        eprintln!("MOLLA_MODEL not set: skipped");
        return;
    };
    let file = GgufFile::open(&path).expect("opens");
    let m = CpuModel::new(Model::from_file(file).expect("binds"));
    let pool = m.new_kv_pool(1024);
    for ctx in [64usize, 512, 1536] {
        let prompt = tokens(ctx, 4);
        for paged in [false, true] {
            let mut kv = if paged {
                KvCache::paged(&pool, 2048)
            } else {
                m.new_cache(2048)
            };
            m.forward(&prompt, &mut kv, Logits::Last).unwrap();
            let t = std::time::Instant::now();
            for s in 0..32 {
                m.forward(&[s + 1], &mut kv, Logits::Last).unwrap();
            }
            let ms = t.elapsed().as_secs_f64() * 1e3 / 32.0;
            println!(
                "context {ctx}, {}: {ms:.2} ms a token",
                if paged { "paged" } else { "flat" }
            );
        }
    }
}

/// Random runs of grow / truncate / share / clear / drop over six caches of one small pool:
/// the pool never counts more than its size or fewer than the distinct blocks held, every
/// forward either runs or reports the pool exhausted, and each cache's next logits stay those
/// of a flat cache fed the same history (a shared block overwritten by another cache would
/// move them far).
#[test]
fn random_block_traffic_keeps_every_cache_intact() {
    let m = load("llama", GgmlType::Q8_0);
    let pool = m.new_kv_pool(24);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    // Each cache with the tokens it holds.
    let mut caches: Vec<(KvCache, Vec<u32>)> = (0..6)
        .map(|_| (KvCache::paged(&pool, 200), Vec::new()))
        .collect();
    for step in 0..400 {
        let i = rnd(caches.len());
        match rnd(10) {
            0..=4 => {
                let n = 1 + rnd(20);
                let toks: Vec<u32> = (0..n).map(|_| rnd(200) as u32).collect();
                let (kv, hist) = &mut caches[i];
                if hist.len() + n > 200 {
                    continue;
                }
                match m.forward(&toks, kv, Logits::Last) {
                    Ok(_) => hist.extend(&toks),
                    Err(CpuError::KvPoolFull { .. }) => assert_eq!(kv.len, hist.len()),
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            5 | 6 => {
                let (kv, hist) = &mut caches[i];
                kv.truncate(rnd(hist.len() + 1));
                hist.truncate(kv.len);
            }
            7 => {
                let j = rnd(caches.len());
                if i == j {
                    continue;
                }
                let n = caches[j].1.len() / BLOCK_POSITIONS * BLOCK_POSITIONS;
                let (a, b) = if i < j {
                    let (l, r) = caches.split_at_mut(j);
                    (&mut l[i], &r[0])
                } else {
                    let (l, r) = caches.split_at_mut(i);
                    (&mut r[0], &l[j])
                };
                if n > 0 && a.0.share_prefix(&b.0, n) {
                    a.1 = b.1[..n].to_vec();
                }
            }
            8 => {
                caches[i].0.clear();
                caches[i].1.clear();
            }
            _ => caches[i] = (KvCache::paged(&pool, 200), Vec::new()),
        }
        assert!(pool.used() <= pool.total(), "step {step}");
        let held: usize = caches.iter().map(|(kv, _)| kv.blocks()).sum();
        assert!(pool.used() <= held, "step {step}: a block leaked");
    }
    for (i, (kv, hist)) in caches.iter_mut().enumerate() {
        if hist.is_empty() || hist.len() >= 200 {
            continue;
        }
        let Ok(got) = m.forward(&[5], kv, Logits::Last) else {
            continue;
        };
        let mut flat = m.new_cache(256);
        m.forward(hist, &mut flat, Logits::Last).unwrap();
        let want = m.forward(&[5], &mut flat, Logits::Last).unwrap();
        let d = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            d < 1e-3,
            "cache {i} ({} tokens): logits moved by {d}",
            hist.len()
        );
    }
}
