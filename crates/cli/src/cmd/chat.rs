//! `molla chat`: a conversation in the terminal. Each turn re-renders the whole conversation
//! with the chat template and only the new tokens are processed (the KV cache keeps the rest).
//! Commands: /reset forgets the conversation, /exit (or end of input) leaves.

use super::gen_args::GenArgs;
use crate::generate::{Finish, generate, tokenize_chat};
use anyhow::Result;
use std::io::{BufRead, Write};
use template::Message;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: GenArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    let s = a.opts.load()?;
    let mut sampler = a.opts.sampler(s.backend.hparams().n_vocab)?;
    let mut cache = s.backend.new_cache(s.ctx)?;
    let start = || a.system.iter().map(|t| Message::new("system", t.as_str())).collect::<Vec<_>>();
    let mut msgs = start();
    // Tokens the cache holds, to find what a new turn adds.
    let mut seen: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut line = String::new();
    eprintln!("molla chat: /reset to start over, /exit or Ctrl-D to leave");
    loop {
        eprint!("> ");
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let text = line.trim_end_matches(['\n', '\r']);
        match text.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                msgs = start();
                seen.clear();
                cache.clear();
                continue;
            }
            _ => {}
        }
        msgs.push(Message::new("user", text));
        let ids = tokenize_chat(&s.tok, &s.template.render(&msgs, None, true)?);
        // Reuse the cached prefix when the new rendering extends it; else start over.
        let new = if ids.starts_with(&seen) && ids.len() > seen.len() {
            &ids[seen.len()..]
        } else {
            cache.clear();
            &ids[..]
        };
        let mut answer = String::new();
        let mut stdout = std::io::stdout().lock();
        let (out, stats) = generate(
            &s.backend,
            &mut cache,
            s.ctx,
            &s.tok,
            &mut sampler,
            new,
            a.opts.max_tokens,
            &a.opts.stop,
            |t| {
                answer.push_str(t);
                stdout.write_all(t.as_bytes())?;
                stdout.flush()?;
                Ok(())
            },
        )?;
        writeln!(stdout)?;
        if !a.opts.quiet {
            eprintln!("[{}]", stats.summary());
        }
        // The cache now holds the prompt and the answer tokens; after a stop string or the
        // length limit the last sampled token has not been run yet.
        let ran = if stats.finish == Finish::Eog { out.len() } else { out.len().saturating_sub(1) };
        seen = ids;
        seen.extend(&out[..ran]);
        msgs.push(Message::new("assistant", answer.as_str()));
    }
    Ok(())
}
