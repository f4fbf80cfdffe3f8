//! `molla logits`: log-softmax of the last position after a list of token ids.

use crate::backend::Backend;
use anyhow::{Context, Result};
use cpu::Logits;
use model::Model;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    #[arg(long)]
    model: PathBuf,
    /// Comma-separated token ids, e.g. 1,2,3.
    #[arg(long)]
    tokens: String,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// KV cache element type: f32 (exact) or f16 (half the memory). Default: f32 on the CPU and
    /// wgpu, f16 on CUDA (whose f32 caches decode on the graph path, not the persistent kernel).
    #[arg(long = "cache-type", value_name = "f32|f16")]
    cache_type: Option<String>,
    /// Run the tokens one at a time (the decode path) instead of as one prefill batch.
    #[arg(long)]
    decode: bool,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

/// The JSON printed, fields in the documented order.
#[derive(serde::Serialize)]
struct Output {
    tokens: Vec<u32>,
    vocab: usize,
    logprobs: Vec<f64>,
}

fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            t.parse::<u32>()
                .with_context(|| format!("--tokens: '{t}' is not a token id"))
        })
        .collect()
}

pub fn run(a: Args) -> Result<()> {
    let device = super::parse_device(&a.device)?;
    super::set_threads(a.threads)?;
    let tokens = parse_tokens(&a.tokens)?;
    let model = Model::open(&a.model).with_context(|| a.model.display().to_string())?;
    let device = server::device_for(&model, device, a.device == "auto");
    let mut m = Backend::new(model, device)?;
    super::apply_cache_type(&mut m, a.cache_type.as_deref())?;
    let mut kv = m.new_cache(tokens.len())?;
    let logits = if a.decode {
        let mut last = Vec::new();
        for t in &tokens {
            last = m.forward(std::slice::from_ref(t), &mut kv, Logits::Last)?;
        }
        last
    } else {
        m.forward(&tokens, &mut kv, Logits::Last)?
    };
    let logprobs = cpu::ops::log_softmax(&logits);
    let out = Output {
        vocab: logprobs.len(),
        tokens,
        logprobs,
    };
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &out)?;
    writeln!(stdout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_tokens;

    #[test]
    fn tokens_parse_and_reject() {
        assert_eq!(parse_tokens("1, 2,3").unwrap(), vec![1, 2, 3]);
        assert!(parse_tokens("1,,2").is_err());
        assert!(parse_tokens("-1").is_err());
        assert!(parse_tokens("99999999999").is_err());
    }
}
