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

/// SmolLM2-135M's shapes, Qwen2.5-0.5B's, or Llama-3.1-8B's ("l8": `MOLLA_BENCH_L8_LAYERS`
/// layers of the 32, default 4, to keep the in-process synthesis short).
fn shape(name: &str, ty: GgmlType) -> SynthSpec {
    match name {
        "qwen" => SynthSpec::qwen2_0_5b(ty),
        "l8" => SynthSpec {
            arch: "llama",
            n_vocab: 128256,
            n_embd: 4096,
            n_layer: std::env::var("MOLLA_BENCH_L8_LAYERS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(4),
            n_ff: 14336,
            n_head: 32,
            n_head_kv: 8,
            ty,
            tied: false,
            seed: 5,
        },
        _ => SynthSpec::smollm2(ty),
    }
}

/// The kinds of a persistent step list's steps: a layer's five, then the head.
const STEP_KINDS: [&str; 6] = ["qkv", "attention", "wo", "gate/up", "down", "head"];

/// Each step's kind (index into STEP_KINDS) from the list's ops (0 matvec, 1 attention, 2
/// attention with wo folded in, the default for legacy-q16 wo, `PkBuild::fold`): per layer q/k/v
/// (none when the down step before made them, `MOLLA_KDEFS=FUSEQKV`), attention, wo (none when
/// folded), gate/up, down; a matvec after the last layer is the head (none when it runs after the
/// kernel).
fn step_kinds(ops: &[i32]) -> Vec<usize> {
    let mut kinds = Vec::with_capacity(ops.len());
    let mut i = 0;
    while i < ops.len() {
        let qkv = ops[i] == 0 && ops.get(i + 1).is_some_and(|&o| o != 0);
        if !qkv && ops[i] == 0 {
            kinds.push(5);
            i += 1;
            continue;
        }
        if qkv {
            kinds.push(0);
            i += 1;
        }
        let rest: &[usize] = if ops[i] == 2 { &[3, 4] } else { &[2, 3, 4] };
        kinds.push(1);
        i += 1;
        for &k in rest.iter().take(ops.len() - i) {
            kinds.push(k);
            i += 1;
        }
    }
    kinds
}

/// A persistent step's trace by kind of step (the five of a layer, then the head), means in us:
/// wake = first block's start less the previous step's last end (the barrier), skew = last
/// start less first start; then per block (mean over blocks): arrive = start until the input
/// had arrived (the wait; 0 unless the kernels are built with `MOLLA_KDEFS=PKMEASURE`), input =
/// start to input ready (prepared: RMSNorm, q16), weights = to first weights ready, rest = to
/// the end; work = last end less first start.
fn print_trace(tag: &str, t: &cuda::Trace) {
    if t.fine {
        return print_fine_trace(tag, t);
    }
    let mut sum = [[0f64; 8]; 6];
    let g = t.grid;
    let kinds = step_kinds(&t.ops);
    let st = |s: usize, b: usize, j: usize| t.stamps[8 * (s * g + b) + j] as f64;
    let t0 = (0..g).map(|b| st(0, b, 0)).fold(f64::MAX, f64::min);
    let mut prev_end = t0;
    for (s, &k) in kinds.iter().enumerate() {
        let lo = (0..g).map(|b| st(s, b, 0)).fold(f64::MAX, f64::min);
        let hi = (0..g).map(|b| st(s, b, 0)).fold(0.0, f64::max);
        let end = (0..g).map(|b| st(s, b, 1)).fold(0.0, f64::max);
        // Cycles to us at the H200's 1.98 GHz boost clock.
        let mean = |j: usize| (0..g).map(|b| st(s, b, j)).sum::<f64>() / g as f64 / 1.98;
        let row = [
            lo - prev_end,
            hi - lo,
            mean(5),
            mean(2),
            mean(3),
            mean(4),
            end - lo,
            1.0,
        ];
        for (a, v) in sum[k].iter_mut().zip(row) {
            *a += v;
        }
        prev_end = end;
    }
    println!(
        "{tag}: trace of one step, total {:.1} us; host: launch call {:.1} us, then {:.1} us until the logits are back",
        (prev_end - t0) / 1e3,
        t.host_us[0],
        t.host_us[1]
    );
    println!("| step | count | wake | skew | arrive | input | weights | rest | work |");
    for (name, s) in STEP_KINDS.iter().zip(sum) {
        let c = s[7].max(1.0);
        let f = |i: usize| s[i] / c / 1e3;
        println!(
            "| {name} | {c} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            f(0),
            f(1),
            f(2),
            f(3),
            f(4),
            f(5),
            f(6)
        );
    }
}

/// The measurement build's trace (`cuda::Trace::fine`) by kind of step, means in us: for the
/// mean block and for the block that ended the step last (the one the next step waited for),
/// its start less the previous step's last end, then staging, wait for the input, RMSNorm sum,
/// the rest of the preparation (attention: rope and cache store), wait for the first weights,
/// rows (attention: the attention), the rest until its end, and start to end.
fn print_fine_trace(tag: &str, t: &cuda::Trace) {
    let mut sum = [[[0f64; 9]; 2]; 6];
    let mut count = [0f64; 6];
    let g = t.grid;
    let kinds = step_kinds(&t.ops);
    let st = |s: usize, b: usize, j: usize| t.stamps[8 * (s * g + b) + j] as f64;
    // Block b's row at step s: cycles to us at the H200's 1.98 GHz boost clock.
    let row = |s: usize, b: usize, prev_end: f64| {
        let mut r = [0f64; 9];
        r[0] = (st(s, b, 0) - prev_end) / 1e3;
        for j in 0..6 {
            r[1 + j] = st(s, b, 2 + j) / 1.98 / 1e3;
        }
        r[8] = (st(s, b, 1) - st(s, b, 0)) / 1e3;
        r[7] = r[8] - r[1..7].iter().sum::<f64>();
        r
    };
    let t0 = (0..g).map(|b| st(0, b, 0)).fold(f64::MAX, f64::min);
    let mut prev_end = t0;
    for (s, &k) in kinds.iter().enumerate() {
        let last = (0..g)
            .max_by(|&a, &b| st(s, a, 1).total_cmp(&st(s, b, 1)))
            .unwrap_or(0);
        for b in 0..g {
            for (a, v) in sum[k][0].iter_mut().zip(row(s, b, prev_end)) {
                *a += v / g as f64;
            }
        }
        for (a, v) in sum[k][1].iter_mut().zip(row(s, last, prev_end)) {
            *a += v;
        }
        count[k] += 1.0;
        prev_end = st(s, last, 1);
    }
    println!(
        "{tag}: fine trace, total {:.1} us; host: launch call {:.1} us, then {:.1} us until the logits are back",
        (prev_end - t0) / 1e3,
        t.host_us[0],
        t.host_us[1]
    );
    println!(
        "| step | block | start | stage | arrive | rms | prep | weights | rows | tail | total |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (k, name) in STEP_KINDS.iter().enumerate() {
        for (i, who) in ["mean", "last"].iter().enumerate() {
            let c = count[k].max(1.0);
            let cells: Vec<String> = sum[k][i].iter().map(|v| format!("{:.2}", v / c)).collect();
            println!("| {name} | {who} | {} |", cells.join(" | "));
        }
    }
}

/// pp512 and tg128 on the three decode paths (persistent kernel, graph replay, plain launches).
/// Median of three runs of 128 decode steps after a 16-token prefill, or one of
/// `MOLLA_BENCH_DEPTH` tokens (and one step that builds the graph or step list), in tok/s.
fn tg128(cuda: &CudaModel, prompt: &[u32], vocab: u32) -> f64 {
    let depth: usize = std::env::var("MOLLA_BENCH_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let fill: Vec<u32> = (0..depth as u32)
        .map(|i| prompt[i as usize % prompt.len()])
        .collect();
    let mut reps = Vec::new();
    for _ in 0..3 {
        let mut kv = cuda.new_cache(1024.max(depth + 256)).unwrap();
        cuda.forward(&fill, &mut kv, Logits::Last).unwrap();
        cuda.forward(&[1], &mut kv, Logits::Last).unwrap();
        let t = Instant::now();
        for s in 0..128u32 {
            cuda.forward(&[s * 31 % vocab], &mut kv, Logits::Last)
                .unwrap();
        }
        reps.push(128.0 / t.elapsed().as_secs_f64());
    }
    median(reps)
}

/// Persistent tg128 under each setting of `MOLLA_BENCH_VARIANTS` ("K=V,K=V;K=V ..."; the
/// variables the step list reads when a cache builds it, e.g. MOLLA_PK_STAGES, MOLLA_PK_CHUNK),
/// one process, one model upload.
fn variants(cuda: &CudaModel, prompt: &[u32], vocab: u32, tag: &str) {
    let Ok(list) = std::env::var("MOLLA_BENCH_VARIANTS") else {
        return;
    };
    cuda.set_persistent(true);
    cuda.set_graphs(true);
    for v in list.split(';').map(str::trim).filter(|v| !v.is_empty()) {
        let mut saved = Vec::new();
        for kv in v.split(',') {
            if let Some((k, val)) = kv.split_once('=') {
                saved.push((k.trim().to_string(), std::env::var(k.trim()).ok()));
                // SAFETY: the test is single-threaded here; nothing else reads the environment.
                unsafe { std::env::set_var(k.trim(), val.trim()) };
            }
        }
        println!(
            "{tag} [{v}]: tg128 {:.0} ({})",
            tg128(cuda, prompt, vocab),
            cuda.decode_path()
        );
        // The next variant and the next shape start from the environment the run was given.
        for (k, old) in saved {
            // SAFETY: as above.
            unsafe {
                match old {
                    Some(o) => std::env::set_var(&k, o),
                    None => std::env::remove_var(&k),
                }
            }
        }
    }
}

/// `MOLLA_BENCH_SHAPES` picks shapes (default "smol:Q8_0 smol:Q4_1 qwen:Q5_0"; widths must be
/// whole blocks of the type: Qwen's 896 is not for K-quants).
#[test]
#[ignore]
fn decode_speed() {
    let Some(_) = gpu() else { return };
    let mut rows = Vec::new();
    let shapes = std::env::var("MOLLA_BENCH_SHAPES")
        .unwrap_or_else(|_| "smol:Q8_0 smol:Q4_1 qwen:Q5_0".into());
    for item in shapes.split_whitespace() {
        let (name, ty) = item.split_once(':').unwrap_or((item, "Q8_0"));
        let ty = GgmlType::from_name(ty).expect("a ggml type name");
        let spec = shape(name, ty);
        let vocab = spec.n_vocab as u32;
        let t0 = Instant::now();
        let m = Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap();
        let t1 = Instant::now();
        let cuda = CudaModel::new(&m, 0).unwrap();
        println!(
            "{name} {ty}: synth {:.1}s, upload+kernels {:.2}s",
            (t1 - t0).as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        let prompt: Vec<u32> = (0..512).map(|i| (i * 97) % vocab).collect();
        let mut pp = Vec::new();
        for _ in 0..4 {
            let mut kv = cuda.new_cache(1024).unwrap();
            let t = Instant::now();
            cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
            pp.push(512.0 / t.elapsed().as_secs_f64());
        }
        pp.remove(0);
        let mut tg = [0.0f64; 3];
        let mut path = String::new();
        for (i, (persistent, graphs)) in [(true, true), (false, true), (false, false)]
            .into_iter()
            .enumerate()
        {
            cuda.set_persistent(persistent);
            cuda.set_graphs(graphs);
            // The persistent column at any depth: the kernel at every position.
            cuda.set_persistent_max_pos(if persistent {
                usize::MAX
            } else {
                cuda::PK_MAX_POS
            });
            tg[i] = tg128(&cuda, &prompt, vocab);
            if i == 0 {
                path = format!("{}; prefill {}", cuda.decode_path(), cuda.prefill_path());
                if let Some(t) = cuda.persistent_trace() {
                    print_trace(&format!("{name} {ty}"), &t);
                }
            }
        }
        variants(&cuda, &prompt, vocab, &format!("{name} {ty}"));
        rows.push(format!(
            "| {name} {ty} | {:.0} | {:.0} | {:.0} | {:.0} | {path} |",
            median(pp),
            tg[0],
            tg[1],
            tg[2]
        ));
    }
    println!("| model | pp512 tok/s | tg128 persistent | tg128 graph | tg128 plain | path |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
}

/// The first shape of `MOLLA_BENCH_SHAPES` ("name:TYPE", else `default`), its spec and the model
/// on the GPU.
fn first_shape(default: &str) -> (String, SynthSpec, CudaModel) {
    let list = std::env::var("MOLLA_BENCH_SHAPES").unwrap_or_else(|_| default.into());
    let item = list
        .split_whitespace()
        .next()
        .unwrap_or(default)
        .to_string();
    let (spec, m) = shape_model(&item);
    let cuda = CudaModel::new(&m, 0).unwrap();
    (item, spec, cuda)
}

/// The synthetic model of a `MOLLA_BENCH_SHAPES` item ("name:TYPE", the type Q8_0 when left
/// out) and its spec.
fn shape_model(item: &str) -> (SynthSpec, Model) {
    let (name, ty) = item.split_once(':').unwrap_or((item, "Q8_0"));
    let spec = shape(name, GgmlType::from_name(ty).expect("a ggml type name"));
    let m = Model::from_file(GgufFile::from_bytes(build(&spec).unwrap()).unwrap()).unwrap();
    (spec, m)
}

/// A timeline's entries summed by kernel, in the order each first appears: (kernel, entries, us).
fn by_kernel(tl: &[cuda::testing::TimelineEntry]) -> Vec<(&'static str, usize, f64)> {
    let mut by: Vec<(&'static str, usize, f64)> = Vec::new();
    for e in tl {
        match by.iter_mut().find(|b| b.0 == e.kernel) {
            Some(b) => {
                b.1 += 1;
                b.2 += e.us;
            }
            None => by.push((e.kernel, 1, e.us)),
        }
    }
    by
}

/// Decode steps with plain launches, for a profiler (`scripts/cuda-tests profile`): the first
/// shape of `MOLLA_BENCH_SHAPES` (default SmolLM2's, Q8_0), a 100-token prefill, then 3 decode
/// steps (for SmolLM2: 362 launches, then 182 each).
#[test]
#[ignore]
fn profile_decode() {
    let Some(_) = gpu() else { return };
    let (_, spec, cuda) = first_shape("smol:Q8_0");
    let vocab = spec.n_vocab as u32;
    // MOLLA_PROFILE_PERSISTENT=1: the persistent kernel's launches instead.
    let persistent = std::env::var("MOLLA_PROFILE_PERSISTENT").is_ok_and(|v| v == "1");
    cuda.set_persistent(persistent);
    cuda.set_graphs(false);
    let mut kv = cuda.new_cache(256).unwrap();
    let prompt: Vec<u32> = (0..100).map(|i| i * 7 % vocab).collect();
    cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
    for t in 0..3 {
        cuda.forward(&[t], &mut kv, Logits::Last).unwrap();
    }
}

/// Where a decode step's device time goes, kernel by kernel (`scripts/cuda-tests timeline`): the
/// first shape of `MOLLA_BENCH_SHAPES` (default the 8B's, Q4_K), plain launches queued behind a
/// held stream so that they run back to back (testing::timeline), one step at position ~100
/// after five warm-up steps. Prints each kernel's share and one layer's sequence, and the graph
/// path's step time for comparison (a graph's launches have smaller gaps than these).
#[test]
#[ignore]
fn kernel_timeline() {
    let Some(_) = gpu() else { return };
    let (item, spec, cuda) = first_shape("l8:Q4_K");
    let (vocab, layers) = (spec.n_vocab as u32, spec.n_layer);
    cuda.set_persistent(false);
    let prompt: Vec<u32> = (0..100).map(|i| i * 7 % vocab).collect();
    // A cache after the prompt and five warm-up steps.
    let warm = || {
        let mut kv = cuda.new_cache(512).unwrap();
        cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
        for t in 0..5 {
            cuda.forward(&[t], &mut kv, Logits::Last).unwrap();
        }
        kv
    };
    // The graph path's step, for comparison.
    cuda.set_graphs(true);
    let mut kv = warm();
    let t0 = Instant::now();
    for t in 0..64 {
        cuda.forward(&[t], &mut kv, Logits::Last).unwrap();
    }
    let graph_us = t0.elapsed().as_secs_f64() * 1e6 / 64.0;
    cuda.set_graphs(false);
    let mut kv = warm();
    let (r, tl) = cuda::testing::timeline(cuda.gpu(), 20_000, || {
        cuda.forward(&[7], &mut kv, Logits::Last)
    })
    .unwrap();
    r.unwrap();
    // The download's entry also holds the host's wake-up after the hold: shown, not summed.
    let total: f64 = tl
        .iter()
        .filter(|e| e.kernel != "download")
        .map(|e| e.us)
        .sum();
    println!(
        "{item}: {layers} layers, {} kernels, {total:.1} us a step back to back without the \
         download (graph path: {graph_us:.1} us a step, host included)",
        tl.len()
    );
    let mut by = by_kernel(&tl);
    by.sort_by(|a, b| b.2.total_cmp(&a.2));
    println!("| kernel | count | us a step | us each | share |");
    println!("| --- | --- | --- | --- | --- |");
    for (k, n, us) in &by {
        let share = if *k == "download" {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * us / total)
        };
        println!("| {k} | {n} | {us:.1} | {:.2} | {share} |", us / *n as f64);
    }
    // One middle layer: after the embedding, every layer launches the same kernels (as many as
    // lie between two attention kernels); the head and the logits' download follow.
    let per = attention_period(tl.len(), |i| tl[i].kernel.contains("attention"))
        .map_or(tl.len().saturating_sub(4), |(_, w)| w);
    let start = 1 + per * (layers / 2);
    println!("layer {} ({per} kernels):", layers / 2);
    for e in tl.iter().skip(start).take(per) {
        println!("  {:<28} {:7.2} us", e.kernel, e.us);
    }
    println!("head and logits:");
    for e in tl.iter().skip(1 + per * layers) {
        println!("  {:<28} {:7.2} us", e.kernel, e.us);
    }
}

/// Where a persistent decode step's time goes between the device and the host
/// (`scripts/cuda-tests gaps`): for each of `MOLLA_GAP_FILES` (GGUF paths; else the shapes of
/// `MOLLA_BENCH_SHAPES`, default "smol:Q4_1 qwen:Q5_0"), 64 steps at positions 16-79 as `molla
/// bench` decodes them (logits read in place on the host), under testing::timeline without a
/// hold. Each entry runs from its launch's mark to the next mark: the persistent kernel's from the
/// host's launch (its launch latency and ramp included) to its end, the head's and its
/// preparation's their own time, and `idle` from the step's end on the device to the next step's
/// launch (the host's wake-up, return and launch call). Prints each kind's mean a step beside the
/// host's wall time a step.
#[test]
#[ignore]
fn decode_gaps() {
    let Some(_) = gpu() else { return };
    let models: Vec<(String, Model)> = match std::env::var("MOLLA_GAP_FILES") {
        Ok(files) => files
            .split_whitespace()
            .map(|f| {
                (
                    f.to_string(),
                    Model::from_file(GgufFile::open(f).unwrap()).unwrap(),
                )
            })
            .collect(),
        Err(_) => std::env::var("MOLLA_BENCH_SHAPES")
            .unwrap_or_else(|_| "smol:Q4_1 qwen:Q5_0".into())
            .split_whitespace()
            .map(|item| (item.to_string(), shape_model(item).1))
            .collect(),
    };
    for (name, m) in &models {
        let cuda = CudaModel::new(m, 0).unwrap();
        let vocab = m.hp.n_vocab as u32;
        let mut kv = cuda.new_cache(256).unwrap();
        for t in 0..16 {
            cuda.forward_with(&[t % vocab], &mut kv, Logits::Last, |_| ())
                .unwrap();
        }
        const STEPS: u32 = 64;
        let t0 = Instant::now();
        let (r, tl) = cuda::testing::timeline(cuda.gpu(), 0, || {
            (0..STEPS).try_for_each(|t| {
                cuda.forward_with(&[(t * 7) % vocab], &mut kv, Logits::Last, |_| ())
            })
        })
        .unwrap();
        let wall = t0.elapsed().as_secs_f64() * 1e6 / f64::from(STEPS);
        r.unwrap();
        println!(
            "{name}: {}; {wall:.1} us a step on the host's clock",
            cuda.decode_path()
        );
        println!("| entry | us a step |");
        println!("| --- | --- |");
        for (k, _, us) in by_kernel(&tl) {
            println!("| {k} | {:.1} |", us / f64::from(STEPS));
        }
    }
}

/// A graph replay's decode step seen from the device (`MOLLA_KDEFS=KTRACE`, kernels/ktrace.cuh):
/// each launch's time from its work's start (its first block past `pdl_wait`) to its last block's
/// end, the gap before it, and how long its first block was resident before its work (PDL). The
/// shape is MOLLA_BENCH_SHAPES's first (default "l8:Q4_K"); the graph path, one token at
/// position ~100 after five warm-up steps, eight steps traced and the middle ones summed.
#[test]
#[ignore]
fn graph_trace() {
    let Some(_) = gpu() else { return };
    if !cuda::testing::ktrace_on() {
        println!("graph_trace: needs MOLLA_KDEFS=KTRACE (kernels built with the trace)");
        return;
    }
    let (item, spec, cuda) = first_shape("l8:Q4_K");
    let (vocab, layers) = (spec.n_vocab as u32, spec.n_layer);
    cuda.set_persistent(false);
    cuda.set_graphs(true);
    let prompt: Vec<u32> = (0..100).map(|i| i * 7 % vocab).collect();
    let mut kv = cuda.new_cache(512).unwrap();
    cuda.forward(&prompt, &mut kv, Logits::Last).unwrap();
    for t in 0..5 {
        cuda.forward(&[t], &mut kv, Logits::Last).unwrap();
    }
    cuda::testing::ktrace_reset(cuda.gpu()).unwrap();
    let steps = 8;
    for t in 0..steps {
        cuda.forward(&[t as u32], &mut kv, Logits::Last).unwrap();
    }
    let tr = cuda::testing::ktrace_read(cuda.gpu()).unwrap();
    // Steps split where each begins (its embedding launch), slots never stamped left out (session
    // 49's trace had one such slot every few steps, which shifted a split by launch counts).
    let (split, empty) = split_steps(&tr, |k| cuda::testing::kind_name(k) == "embed");
    let Some(per) = common_len(&split) else {
        println!("graph_trace: no step in {} launches", tr.len());
        return;
    };
    // The middle steps of that length (the first and last may meet the host's copies).
    let mid: Vec<&[cuda::testing::Launch]> = split
        .iter()
        .enumerate()
        .filter(|&(i, s)| i >= 2 && i + 1 < split.len() && s.len() == per)
        .map(|(_, s)| s.as_slice())
        .collect();
    if mid.is_empty() {
        println!(
            "graph_trace: {} steps of {per} launches, none in the middle",
            split.len()
        );
        return;
    }
    println!(
        "{} launches traced for {steps} steps: {} steps, {} of {per} launches used, {empty} empty slots",
        tr.len(),
        split.len(),
        mid.len()
    );
    let us = |ns: u64| ns as f64 / 1000.0;
    let span: Vec<f64> = mid.iter().map(|s| us(s[per - 1].t1 - s[0].t0)).collect();
    println!(
        "{item}: {layers} layers, {per} launches a step, {:.1} us from the first launch's start \
         to the last one's end (median of {})",
        median(span),
        mid.len()
    );
    // A launch's work starts when its first block passes pdl_wait (under MOLLA_PDL that block
    // may have started, and waited, before the launch before ended).
    let work = |l: &cuda::testing::Launch| l.tw.max(l.t0);
    // The gap before launch i of a step: from the last one's end to this one's work (none
    // before its first).
    let gap = |s: &[cuda::testing::Launch], i: usize| {
        if i == 0 {
            0
        } else {
            work(&s[i]).saturating_sub(s[i - 1].t1)
        }
    };
    // By kernel: time inside launches (from the work's start), in the gaps before them, and
    // resident before the work, a step.
    let mut by: Vec<(u32, usize, f64, f64, f64)> = Vec::new();
    for s in &mid {
        for (i, l) in s.iter().enumerate() {
            let e = match by.iter_mut().find(|b| b.0 == l.kind) {
                Some(e) => e,
                None => {
                    by.push((l.kind, 0, 0.0, 0.0, 0.0));
                    by.last_mut().unwrap()
                }
            };
            e.1 += 1;
            e.2 += us(l.t1.saturating_sub(work(l)));
            e.3 += us(gap(s, i));
            e.4 += us(work(l) - l.t0);
        }
    }
    let n = mid.len() as f64;
    println!(
        "| kernel | launches a step | us inside a step | us each | us of gaps before, each | \
         us resident before its work, each |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (k, c, inside, gaps, early) in &by {
        let c = *c as f64;
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2} |",
            cuda::testing::kind_name(*k),
            c / n,
            inside / n,
            inside / c,
            gaps / c,
            early / c
        );
    }
    // One middle layer of the third step: the launches between two attention launches.
    let s = mid[0];
    let att = attention_period(per, |i| {
        cuda::testing::kind_name(s[i].kind).contains("attention")
    });
    if let Some((a, w)) = att {
        let start = a + w * (layers / 2).saturating_sub(1);
        println!("a layer ({w} launches): kernel, us inside, us of gap before");
        for i in start..(start + w).min(per) {
            println!(
                "  {:<20} {:7.2} {:7.2}",
                cuda::testing::kind_name(s[i].kind),
                us(s[i].t1.saturating_sub(work(&s[i]))),
                us(gap(s, i))
            );
        }
    }
}

/// The traced launches in steps, each from a launch whose kind `starts` (its embedding) to the
/// next, leaving out slots no launch stamped (kind 0 or no start time), and how many those were.
/// Launches before the first start are dropped.
fn split_steps(
    tr: &[cuda::testing::Launch],
    starts: impl Fn(u32) -> bool,
) -> (Vec<Vec<cuda::testing::Launch>>, usize) {
    let mut steps: Vec<Vec<cuda::testing::Launch>> = Vec::new();
    let mut empty = 0;
    for l in tr {
        if l.kind == 0 || l.t0 == 0 {
            empty += 1;
        } else if starts(l.kind) {
            steps.push(vec![*l]);
        } else if let Some(s) = steps.last_mut() {
            s.push(*l);
        }
    }
    (steps, empty)
}

/// The commonest length of `steps` (the longer on a tie), None when there are none.
fn common_len(steps: &[Vec<cuda::testing::Launch>]) -> Option<usize> {
    let mut count = std::collections::BTreeMap::new();
    for s in steps {
        *count.entry(s.len()).or_insert(0usize) += 1;
    }
    count
        .into_iter()
        .max_by_key(|&(len, n)| (n, len))
        .map(|(len, _)| len)
}

#[test]
fn steps_split_at_each_embedding_launch() {
    let l = |kind, t0| cuda::testing::Launch {
        kind,
        t0,
        tw: 0,
        t1: t0 + 1,
    };
    // A stray launch before the first step, an empty slot inside the second.
    let tr = [
        l(5, 1),
        l(1, 2),
        l(5, 3),
        l(7, 4),
        l(1, 5),
        l(0, 0),
        l(5, 6),
        l(7, 7),
        l(1, 8),
        l(5, 9),
    ];
    let (steps, empty) = split_steps(&tr, |k| k == 1);
    let lens: Vec<usize> = steps.iter().map(Vec::len).collect();
    assert_eq!((lens, empty), (vec![3, 3, 2], 1));
    assert_eq!(common_len(&steps), Some(3));
    assert_eq!(common_len(&[]), None);
}

/// The first of a step's n launches that `is_att` calls attention, and how many launches lie
/// from it to the next (a layer's), when there are two.
fn attention_period(n: usize, is_att: impl Fn(usize) -> bool) -> Option<(usize, usize)> {
    let mut att = (0..n).filter(|&i| is_att(i));
    let a = att.next()?;
    Some((a, att.next()? - a))
}

#[test]
fn step_kinds_follow_the_ops() {
    // Two layers and the head; two folded layers with the head after the kernel.
    assert_eq!(
        step_kinds(&[0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
        [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        step_kinds(&[0, 2, 0, 0, 0, 2, 0, 0]),
        [0, 1, 3, 4, 0, 1, 3, 4]
    );
    // Fused q/k/v (MOLLA_KDEFS=FUSEQKV): the first layer's only, then the head.
    assert_eq!(
        step_kinds(&[0, 2, 0, 0, 2, 0, 0, 0]),
        [0, 1, 3, 4, 1, 3, 4, 5]
    );
}
