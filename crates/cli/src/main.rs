//! The `molla` command line.

mod backend;
mod cmd;
mod default_model;
mod generate;
mod hub;
mod progress;
mod repl;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "molla", version, about = "Local LLM inference on GGUF models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer one prompt (the model's chat template applied unless --raw).
    Run(cmd::run::Args),
    /// Chat in the terminal.
    Chat(cmd::chat::Args),
    /// Print a GGUF file's metadata and tensor table.
    Inspect(cmd::inspect::Args),
    /// Print the log-probabilities of the next token after the given token ids, as JSON.
    Logits(cmd::logits::Args),
    /// Measure prompt-processing and generation speed.
    Bench(cmd::bench::Args),
    /// Print the token ids of a text as JSON.
    Tokenize(cmd::tokenize::Args),
    /// Serve the model over HTTP (OpenAI- and Anthropic-compatible API).
    Serve(cmd::serve::Args),
    /// Re-encode a GGUF model's weights in another type.
    Quantize(cmd::quantize::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Logits(a) => cmd::logits::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Serve(a) => cmd::serve::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes joined by ": ".
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}
