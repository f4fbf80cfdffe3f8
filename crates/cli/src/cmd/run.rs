//! `molla run`: one prompt, one answer on stdout (progress and stats on stderr).

use super::gen_args::GenArgs;
use crate::generate::{generate, tokenize_chat};
use anyhow::{Result, bail};
use std::io::Write;
use template::Message;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: GenArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Send the prompt as is, without the model's chat template.
    #[arg(long)]
    raw: bool,
    /// The prompt.
    prompt: String,
}

pub fn run(a: Args) -> Result<()> {
    let s = a.opts.load()?;
    let ids = if a.raw {
        s.tok.encode(&a.prompt, true, true)
    } else {
        let mut msgs = Vec::new();
        if let Some(sys) = &a.system {
            msgs.push(Message::new("system", sys.as_str()));
        }
        msgs.push(Message::new("user", a.prompt.as_str()));
        tokenize_chat(&s.tok, &s.template.render(&msgs, None, true)?)
    };
    if ids.len() >= s.ctx {
        bail!(
            "the prompt ({} tokens) does not fit the context of {} tokens",
            ids.len(),
            s.ctx
        );
    }
    if !a.opts.quiet {
        s.announce();
    }
    let mut cache = s.backend.new_cache(s.ctx)?;
    let mut sampler = a.opts.sampler(s.backend.hparams().n_vocab)?;
    let mut stdout = std::io::stdout().lock();
    let (_, stats) = generate(
        &s.backend,
        &mut cache,
        s.ctx,
        &s.tok,
        &mut sampler,
        &ids,
        a.opts.limits(&s, None),
        |t| {
            stdout.write_all(t.as_bytes())?;
            stdout.flush()?;
            Ok(())
        },
    )?;
    writeln!(stdout)?;
    if !a.opts.quiet {
        eprintln!("{}", stats.summary());
    }
    Ok(())
}
