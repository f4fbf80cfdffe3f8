//! `molla tokenize`: token ids of a text, with llama-tokenize's defaults (BOS as the model's
//! metadata says, special tokens written in the text recognised).

use anyhow::{Context, Result};
use std::path::PathBuf;
use tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (only its vocabulary is read).
    #[arg(long)]
    model: PathBuf,
    /// Text to tokenize.
    #[arg(long)]
    text: String,
    /// Do not add BOS/EOS even where the model's metadata asks for them.
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text such as <|im_start|> as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Also print each token's text.
    #[arg(long)]
    pieces: bool,
}

pub fn run(a: Args) -> Result<()> {
    let tok = Tokenizer::open(&a.model).with_context(|| a.model.display().to_string())?;
    let ids = tok.encode(&a.text, !a.no_bos, !a.no_parse_special);
    let mut out = serde_json::json!({ "ids": ids });
    if a.pieces {
        let pieces: Vec<String> = ids
            .iter()
            .map(|&id| {
                tok.token_to_piece(id)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
            })
            .collect::<std::result::Result<_, _>>()?;
        out["pieces"] = serde_json::json!(pieces);
    }
    println!("{out}");
    Ok(())
}
