//! `molla bench`: prompt-processing and generation speed, llama-bench style.

use crate::backend::Backend;
use anyhow::{Context, Result};
use cpu::Logits;
use model::Model;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    #[arg(long)]
    model: PathBuf,
    /// Prompt tokens processed in one batch (0 skips the test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Tokens generated one at a time (0 skips the test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Tokens already in the cache when each test starts (llama-bench's `-d`): prefilled once,
    /// untimed, so that the tests measure at that depth.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    depth: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    #[arg(long, default_value = "cpu")]
    device: String,
    /// KV cache element type: f32 (exact) or f16 (half the memory). Default: f32 on the CPU and
    /// wgpu, f16 on CUDA (whose f32 caches decode on the graph path, not the persistent kernel).
    #[arg(long = "cache-type", value_name = "f32|f16")]
    cache_type: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Generate as `molla run --temp 0` does: on CUDA (unless `MOLLA_CHAIN=0`) the greedy pick made
    /// on the device and each step's input taken from the step before's pick there, steps
    /// queued ahead (the tokens decoded after the first are then the model's own picks); with
    /// `MOLLA_CUDA_PICK=1` the pick made on the device step by step; else the host's greedy
    /// pick. llama-bench copies the logits back and samples nothing, as the default here.
    #[arg(long)]
    pick: bool,
    /// Generate as sampling with top-k = K does where the backend finds the top K on the device
    /// (CUDA with `MOLLA_CUDA_PICK=1`: K candidates back a token instead of the logits).
    #[arg(long, value_name = "K")]
    top: Option<usize>,
}

/// Median and (min, max) of a sample.
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let med = if s.is_empty() {
        0.0
    } else if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (
        med,
        s.first().copied().unwrap_or(0.0),
        s.last().copied().unwrap_or(0.0),
    )
}

/// Peak resident set size in bytes (Linux), 0 where unknown.
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Deterministic token ids spread over the vocabulary.
fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

pub fn run(a: Args) -> Result<()> {
    let device = super::parse_device(&a.device)?;
    super::set_threads(a.threads)?;
    let load = Instant::now();
    let model = Model::open(&a.model).with_context(|| a.model.display().to_string())?;
    let desc = model.describe();
    let device = server::device_for(&model, device, a.device == "auto");
    let mut m = Backend::new(model, device)?;
    super::apply_cache_type(&mut m, a.cache_type.as_deref())?;
    let load_s = load.elapsed().as_secs_f64();
    let vocab = m.hparams().n_vocab;
    let dev = m.device_name();
    let mut kv = m.new_cache(a.depth + (a.n_prompt + 1).max(a.n_gen).max(1))?;
    if a.depth > 0 {
        m.forward(&tokens(a.depth, vocab), &mut kv, Logits::Last)?;
    }
    let reps = a.reps.max(1);
    let (mut pp, mut tg, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    // One untimed warm-up of each test touches every weight page.
    for rep in 0..=reps {
        if a.n_prompt > 0 {
            kv.truncate(a.depth);
            let t = Instant::now();
            m.forward(&tokens(a.n_prompt, vocab), &mut kv, Logits::Last)?;
            let prefill = t.elapsed().as_secs_f64();
            m.forward_with(&[1], &mut kv, Logits::Last, |_| ())?;
            if rep > 0 {
                pp.push(a.n_prompt as f64 / prefill);
                ttft.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        if a.n_gen > 0 {
            kv.truncate(a.depth);
            let toks = tokens(a.n_gen, vocab);
            let t = Instant::now();
            let chained = a
                .pick
                .then(|| m.decode_greedy(toks[0], a.n_gen, &mut kv, |p| p.is_ok()))
                .flatten();
            let stepwise = chained.is_none();
            if let Some(steps) = chained {
                let steps = steps?;
                anyhow::ensure!(
                    steps == a.n_gen,
                    "greedy decoding stopped after {steps} of {} steps (a pick that is not a token)",
                    a.n_gen
                );
            }
            // Each step's logits land on the host and are left there, as llama-bench's are
            // (generation reads them in place, `server::generate`).
            for &tok in toks.iter().filter(|_| stepwise) {
                if let Some(id) = a.pick.then(|| m.forward_pick(&[tok], &mut kv)).flatten() {
                    id?;
                } else if let Some(top) = a.top.and_then(|k| m.forward_top(&[tok], &mut kv, k)) {
                    top?;
                } else {
                    m.forward_with(&[tok], &mut kv, Logits::Last, |_| ())?
                }
            }
            if rep > 0 {
                tg.push(a.n_gen as f64 / t.elapsed().as_secs_f64());
            }
        }
    }
    let threads = rayon::current_num_threads();
    let path = m.decode_path();
    let (pp_med, pp_min, pp_max) = stats(&pp);
    let (tg_med, tg_min, tg_max) = stats(&tg);
    let (ttft_med, _, _) = stats(&ttft);
    if a.json {
        let out = serde_json::json!({
            "model": a.model.display().to_string(), "device": dev, "threads": threads,
            "decode_path": path, "pick": a.pick, "top": a.top,
            "n_prompt": a.n_prompt, "n_gen": a.n_gen, "n_depth": a.depth, "repetitions": reps,
            "pp_tok_s": pp_med, "pp_tok_s_min": pp_min, "pp_tok_s_max": pp_max,
            "tg_tok_s": tg_med, "tg_tok_s_min": tg_min, "tg_tok_s_max": tg_max,
            "ttft_ms": ttft_med, "load_s": load_s, "peak_rss_bytes": peak_rss(),
        });
        println!("{out}");
        return Ok(());
    }
    println!("{desc}");
    println!("decode: {path}");
    println!("| model | device | threads | test | tok/s (median) | min .. max |");
    println!("|---|---|---|---|---|---|");
    let name = a
        .model
        .file_name()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    // As llama-bench names a test at a depth: "tg128 @ d4096".
    let at = if a.depth > 0 {
        format!(" @ d{}", a.depth)
    } else {
        String::new()
    };
    if a.n_prompt > 0 {
        println!(
            "| {name} | {dev} | {threads} | pp{}{at} | {pp_med:.2} | {pp_min:.2} .. {pp_max:.2} |",
            a.n_prompt
        );
    }
    if a.n_gen > 0 {
        println!(
            "| {name} | {dev} | {threads} | tg{}{at} | {tg_med:.2} | {tg_min:.2} .. {tg_max:.2} |",
            a.n_gen
        );
    }
    println!(
        "\ntime to first token (pp{} + 1 step): {ttft_med:.1} ms; load {load_s:.2} s; peak RSS {}",
        a.n_prompt,
        super::inspect::human_bytes(peak_rss())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::stats;

    #[test]
    fn median_and_range() {
        assert_eq!(stats(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(stats(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
        assert_eq!(stats(&[]), (0.0, 0.0, 0.0));
    }
}
