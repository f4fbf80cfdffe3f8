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
}

pub fn run(a: Args) -> Result<()> {
    let device = super::parse_device(&a.device)?;
    super::set_threads(a.threads)?;
    if !a.model.exists() {
        anyhow::bail!("model file {} not found", a.model.display());
    }
    let cfg = server::Config {
        ctx: a.ctx,
        device,
        api_key: a.api_key,
        ..server::Config::default()
    };
    let state =
        server::State::load(&a.model, &cfg).with_context(|| a.model.display().to_string())?;
    eprintln!(
        "molla: {} on {}, context {} tokens",
        a.model.display(),
        state.device_name,
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
        eprintln!("molla: listening on http://{addr}");
        axum::serve(listener, server::app(std::sync::Arc::new(state)))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok(())
    })
}
