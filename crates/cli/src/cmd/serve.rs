//! `molla serve`: the OpenAI/Anthropic-compatible HTTP server (crates/server).

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model file to serve.
    #[arg(long, short = 'm', value_name = "PATH")]
    pub model: PathBuf,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require this key (Authorization: Bearer KEY, or x-api-key: KEY).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Context size in tokens (0: the model's training context, at most 8192).
    #[arg(long, default_value_t = 0)]
    pub ctx: usize,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Sequences generated at once (continuous batching); each slot has its own KV cache of
    /// --ctx positions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// KV cache blocks of 16 positions that the slots share on the CPU, allocated as they are
    /// first needed (0: enough for every slot's full context). Fewer let more slots run than
    /// full contexts would fit in memory: a request starts once its prompt plus max_tokens fit
    /// beside what the running ones may still fill.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub kv_blocks: usize,
    /// Most prompt tokens prefilled in one engine step (longer prompts take several steps, so
    /// other sequences keep generating meanwhile).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill_chunk: u32,
    /// Prompt chunks of at most N tokens run as rows of the step's batched decode pass, beside
    /// the generating sequences, instead of a prefill pass of their own: for CUDA, where a short
    /// prompt prefilled alone is bound by kernel launches. 0: never. Default: 64 on CUDA, 0 on
    /// the CPU and wgpu.
    #[arg(long, value_name = "N")]
    pub mix_max: Option<usize>,
    /// Requests that may wait for a free slot before new ones get 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Generation requests (chat, completions, messages, embeddings; streams until they end)
    /// one client may have in flight; more get 429. A client is the API key when --api-key is
    /// set, else the peer IP address. 0: no cap.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_per_client: usize,
    /// Seconds a client may take to send a request's headers, and then its body: slower
    /// clients are disconnected (headers) or answered 408 (body); idle keep-alive connections
    /// close after it too. Generation and streaming are never timed. 0: no limit.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub request_timeout: u64,
    /// Connections open at once; further ones wait until one closes. 0: no limit.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_connections: usize,
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    pub log: tracing_subscriber::filter::LevelFilter,
}

pub fn run(a: Args) -> Result<()> {
    let device = super::parse_device(&a.device)?;
    super::set_threads(a.threads)?;
    if !a.model.exists() {
        anyhow::bail!("model file {} not found", a.model.display());
    }
    let _ = tracing_subscriber::fmt()
        .with_max_level(a.log)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    let cfg = server::Config {
        ctx: a.ctx,
        device,
        api_key: a.api_key,
        parallel: a.parallel.into(),
        kv_blocks: a.kv_blocks,
        queue: a.queue,
        prefill_chunk: a.prefill_chunk as usize,
        mix_max: a.mix_max,
        max_per_client: a.max_per_client,
        request_timeout: std::time::Duration::from_secs(a.request_timeout),
        max_connections: a.max_connections,
        auto_device: a.device == "auto",
        ..server::Config::default()
    };
    let state =
        server::State::load(&a.model, &cfg).with_context(|| a.model.display().to_string())?;
    if a.kv_blocks != 0 && state.device_name != "cpu" {
        eprintln!(
            "molla: --kv-blocks applies to the CPU backend; on {} each slot keeps its own cache",
            state.device_name
        );
    }
    eprintln!(
        "molla: {} on {}, {} slot(s) of {} tokens",
        a.model.display(),
        state.device_name,
        a.parallel,
        state.ctx
    );
    let addr = format!("{}:{}", a.host, a.port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr().map_or(addr, |a| a.to_string());
        eprintln!("molla: listening on http://{bound}");
        server::serve(listener, std::sync::Arc::new(state), shutdown()).await?;
        eprintln!("molla: drained, exiting");
        Ok(())
    })
}

/// Resolves on Ctrl-C or SIGTERM: the server then stops accepting connections and finishes the
/// requests it has (streams included) before `run` returns.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    eprintln!("molla: shutting down: finishing accepted requests");
}
