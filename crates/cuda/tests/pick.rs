//! The greedy pick on the device (kernels/pick.cu, `CudaModel::forward_pick`): the host sampler's
//! choice (highest logit, lowest id among equals, -inf masked, NaN / +inf refused) on crafted and
//! random rows, and on every decode path the pick of the logits `forward` returns. The same for
//! the top k logits (`pick_top`, `CudaModel::forward_top`) against the host's `TopLogits::of`,
//! which in turn gives the set the host sampler draws from.

mod common;

use common::{Rng, gpu, load, small_spec};
use cpu::Logits;
use cuda::{Pick, TopLogits};
use gguf::GgmlType;
use sampler::{Sampler, SamplerConfig};

/// The host sampler's greedy choice, as a `Pick`.
fn host(logits: &[f32]) -> Pick {
    let mut s = Sampler::new(SamplerConfig::greedy(), logits.len()).unwrap();
    match s.sample(logits, &[]) {
        Ok(id) => Pick::Token(id),
        Err(sampler::SamplerError::BadLogit { index, value }) => Pick::BadLogit { index, value },
        Err(sampler::SamplerError::NoCandidates) => Pick::NoCandidates,
        Err(e) => panic!("sampler: {e}"),
    }
}

#[test]
fn picks_what_the_host_sampler_picks() {
    let mut rng = Rng::new(3);
    let inf = f32::INFINITY;
    let mut rows: Vec<Vec<f32>> = vec![
        vec![1.0, 3.0, 3.0, 2.0],
        vec![-inf, -inf, -inf],
        vec![-inf, -5.0, -inf, -5.0],
        vec![0.0, f32::NAN, 9.0, inf],
        vec![0.0, 1.0, inf, f32::NAN],
        vec![-0.0, 0.0],
        vec![2.5],
    ];
    for n in [49152usize, 151936, 128256, 1000, 1023, 1025] {
        let mut v = rng.vec(n, 4.0);
        // Ties across threads and warps: the same maximum far apart.
        let m = v.iter().cloned().fold(f32::MIN, f32::max) + 1.0;
        v[n - 1] = m;
        v[n / 3] = m;
        v[n / 2 + 7] = m;
        rows.push(v);
    }
    // Across the kernel's blocks (8192 logits each): a block of all -inf.
    rows.extend(across_blocks(&mut rng));
    let mut v = rng.vec(49152, 4.0);
    v[8192..16384].fill(-inf);
    rows.push(v);
    // The host rule the engine uses for prefill agrees with the sampler everywhere.
    for r in &rows {
        assert_eq!(Pick::of(r), host(r), "Pick::of on {} logits", r.len());
    }
    let Some(g) = gpu() else { return };
    for r in &rows {
        let (p, f) = cuda::testing::pick(&g, r, None).unwrap();
        assert_eq!(p, host(r), "device pick on {} logits", r.len());
        assert_eq!(f, 0);
        let (p, f) = cuda::testing::pick(&g, r, Some(0xdead_beef)).unwrap();
        assert_eq!((p, f), (host(r), 0xdead_beef), "with the flag word");
    }
    println!(
        "pick_greedy: the host sampler's choice on {} rows",
        rows.len()
    );
}

#[test]
fn forward_pick_is_the_pick_of_the_logits_on_every_path() {
    let Some(_) = gpu() else { return };
    for s in [
        small_spec("llama", GgmlType::Q8_0, 576, 1536, 2, 41),
        small_spec("qwen2", GgmlType::Q4_K, 512, 1536, 2, 42),
    ] {
        let m = load(&s);
        // With the head after the persistent kernel, its grid makes the pick (matvec_wide_pick).
        for (persistent, graphs, outside) in [
            (true, true, None),
            (true, true, Some(true)),
            (false, true, None),
            (false, false, None),
        ] {
            m.set_persistent(persistent);
            m.set_graphs(graphs);
            m.set_persistent_head(outside);
            let tag = format!(
                "{} {} persistent {persistent} graphs {graphs} head outside {outside:?}",
                s.arch, s.ty
            );
            let prompt: Vec<u32> = (0..23).map(|i| (i * 131 + 7) % 4096).collect();
            let (mut a, mut b) = (m.new_cache(64).unwrap(), m.new_cache(64).unwrap());
            let want = Pick::of(&m.forward(&prompt, &mut a, Logits::Last).unwrap());
            assert_eq!(
                m.forward_pick(&prompt, &mut b).unwrap(),
                want,
                "{tag}: prefill"
            );
            let mut tok = match want {
                Pick::Token(t) => t,
                p => panic!("{tag}: {p:?}"),
            };
            for step in 0..12 {
                let want = Pick::of(&m.forward(&[tok], &mut a, Logits::Last).unwrap());
                let got = m.forward_pick(&[tok], &mut b).unwrap();
                assert_eq!(got, want, "{tag}: step {step}");
                assert_eq!(a.len, b.len);
                tok = match got {
                    Pick::Token(t) => t,
                    p => panic!("{tag}: {p:?}"),
                };
            }
            println!(
                "{tag}: forward_pick matches the logits' pick over 12 steps ({})",
                m.decode_path()
            );
        }
        m.set_persistent_head(None);
    }
}

/// Greedy decoding chained on the device (`decode_greedy`: each step's input the pick the step
/// before left on the device, steps queued ahead) gives the host's picks of the logits step by
/// step, on every path, with the head inside the persistent kernel and after it (the pick then
/// made by the head's grid), when stopped early and resumed, and across the persistent kernel's
/// hand-over to the graph path.
#[test]
fn decode_greedy_gives_the_host_picks_step_by_step() {
    let Some(_) = gpu() else { return };
    for s in [
        small_spec("llama", GgmlType::Q8_0, 576, 1536, 2, 41),
        small_spec("qwen2", GgmlType::Q4_K, 512, 1536, 2, 42),
    ] {
        let m = load(&s);
        let prompt: Vec<u32> = (0..23).map(|i| (i * 131 + 7) % 4096).collect();
        // The head inside the kernel or after it (where the chain's pick is made by the head's
        // own grid, matvec_wide_pick, instead of pick_greedy).
        for (persistent, max_pos, outside) in [
            (true, 4096, None),
            (true, 4096, Some(true)),
            (true, prompt.len() + 7, Some(true)),
            (false, 4096, None),
        ] {
            m.set_persistent(persistent);
            m.set_persistent_max_pos(max_pos);
            m.set_persistent_head(outside);
            let tag = format!(
                "{} {} persistent {persistent} up to {max_pos} head outside {outside:?}",
                s.arch, s.ty
            );
            let steps = 20;
            // The reference: the host's pick of each step's logits.
            let mut a = m.new_cache(64).unwrap();
            let first = match Pick::of(&m.forward(&prompt, &mut a, Logits::Last).unwrap()) {
                Pick::Token(t) => t,
                p => panic!("{tag}: {p:?}"),
            };
            let mut want = Vec::new();
            let mut tok = first;
            for _ in 0..steps {
                let p = Pick::of(&m.forward(&[tok], &mut a, Logits::Last).unwrap());
                want.push(p);
                tok = match p {
                    Pick::Token(t) => t,
                    p => panic!("{tag}: {p:?}"),
                };
            }
            // In one go.
            let mut b = m.new_cache(64).unwrap();
            m.forward_pick(&prompt, &mut b).unwrap();
            let mut got = Vec::new();
            let n = m
                .decode_greedy(first, steps, &mut b, |p| {
                    got.push(p);
                    true
                })
                .unwrap();
            assert_eq!((n, &got), (steps, &want), "{tag}: chained");
            assert_eq!(b.len, a.len, "{tag}: cache length");
            // Stopped after the fifth pick (that step stays in the cache), then resumed from it.
            let mut c = m.new_cache(64).unwrap();
            m.forward_pick(&prompt, &mut c).unwrap();
            let mut got = Vec::new();
            let n = m
                .decode_greedy(first, steps, &mut c, |p| {
                    got.push(p);
                    got.len() < 5
                })
                .unwrap();
            assert_eq!((n, c.len), (5, prompt.len() + 5), "{tag}: stopped");
            let Pick::Token(t) = got[4] else {
                panic!("{tag}: {:?}", got[4])
            };
            let n = m
                .decode_greedy(t, steps - 5, &mut c, |p| {
                    got.push(p);
                    true
                })
                .unwrap();
            assert_eq!((n + 5, &got), (steps, &want), "{tag}: resumed");
            assert_eq!(c.len, a.len, "{tag}: cache length, resumed");
            println!(
                "{tag}: decode_greedy gives forward_pick's {steps} picks ({})",
                m.decode_path()
            );
        }
        m.set_persistent_max_pos(cuda::PK_MAX_POS);
        m.set_persistent_head(None);
    }
}

/// Rows for the top-k kernel: random rows of real vocabulary sizes, with ties (equal logits in
/// different blocks, -0 and +0), masked stretches, and `across_blocks`.
fn top_rows(rng: &mut Rng) -> Vec<Vec<f32>> {
    let inf = f32::INFINITY;
    let mut rows = vec![
        vec![1.0, 3.0, 3.0, 2.0],
        vec![-inf; 5],
        vec![0.0, f32::NAN, inf],
    ];
    for n in [49152usize, 151936, 128256, 262144, 1000, 4097] {
        let mut v = rng.vec(n, 4.0);
        let m = v.iter().cloned().fold(f32::MIN, f32::max);
        for (j, i) in [n - 1, n / 3, n / 2 + 7, 5].into_iter().enumerate() {
            v[i] = m + (j / 2) as f32;
        }
        rows.push(v);
    }
    let mut v = vec![-1.0f32; 49152];
    for i in (0..49152).step_by(997) {
        v[i] = if i % 2 == 0 { 0.0 } else { -0.0 };
    }
    v[4096..8192].fill(-inf);
    rows.push(v);
    rows.extend(across_blocks(rng));
    rows
}

/// Rows whose answer spans the kernels' blocks: bad logits in two blocks, the lower one
/// first; a row masked but for two logits, the first and the last block's.
fn across_blocks(rng: &mut Rng) -> [Vec<f32>; 2] {
    let inf = f32::INFINITY;
    let mut bad = rng.vec(151936, 4.0);
    bad[100_000] = f32::NAN;
    bad[20_000] = inf;
    let mut masked = vec![-inf; 128256];
    masked[128255] = -3.0;
    masked[7] = -3.0;
    [bad, masked]
}

#[test]
fn top_k_is_what_the_host_finds() {
    let mut rng = Rng::new(5);
    let rows = top_rows(&mut rng);
    // The host rule gives the set the sampler draws from: its top-k candidates.
    for r in rows
        .iter()
        .filter(|r| r.iter().all(|l| !l.is_nan() && *l != f32::INFINITY))
    {
        if let TopLogits::Top(t) = TopLogits::of(r, 40) {
            assert_eq!(t, sampler::top_candidates(r, 40), "{} logits", r.len());
        }
    }
    let Some(g) = gpu() else { return };
    for r in &rows {
        for k in [1usize, 2, 40, 64] {
            if !cuda::top_k_fits(r.len(), k) {
                continue;
            }
            let want = TopLogits::of(r, k);
            let (got, f) = cuda::testing::top(&g, r, k, None).unwrap();
            assert_eq!(got, want, "top {k} of {} logits", r.len());
            assert_eq!(f, 0);
            let (got, f) = cuda::testing::top(&g, r, k, Some(0xdead_beef)).unwrap();
            assert_eq!((got, f), (want, 0xdead_beef), "top {k}, with the flag word");
        }
    }
    println!("pick_top: the host's top k on {} rows", rows.len());
}

#[test]
fn forward_top_is_the_top_of_the_logits_on_every_path() {
    let Some(_) = gpu() else { return };
    let s = small_spec("llama", GgmlType::Q8_0, 576, 1536, 2, 43);
    let m = load(&s);
    for (persistent, graphs) in [(true, true), (false, true), (false, false)] {
        m.set_persistent(persistent);
        m.set_graphs(graphs);
        let tag = format!("persistent {persistent} graphs {graphs}");
        let prompt: Vec<u32> = (0..23).map(|i| (i * 131 + 7) % 4096).collect();
        let (mut a, mut b) = (m.new_cache(64).unwrap(), m.new_cache(64).unwrap());
        let want = TopLogits::of(&m.forward(&prompt, &mut a, Logits::Last).unwrap(), 40);
        assert_eq!(
            m.forward_top(&prompt, &mut b, 40).unwrap(),
            want,
            "{tag}: prefill"
        );
        let mut tok = 1u32;
        for step in 0..12 {
            let k = [40usize, 1, 64][step % 3];
            let want = TopLogits::of(&m.forward(&[tok], &mut a, Logits::Last).unwrap(), k);
            let got = m.forward_top(&[tok], &mut b, k).unwrap();
            assert_eq!(got, want, "{tag}: step {step}, top {k}");
            tok = match got {
                TopLogits::Top(t) => t[t.len() / 2].0,
                t => panic!("{tag}: {t:?}"),
            };
        }
        assert!(m.forward_top(&[tok], &mut b, cuda::TOPK_MAX + 1).is_err());
        println!(
            "{tag}: forward_top matches the logits' top k over 12 steps ({})",
            m.decode_path()
        );
    }
}
