//! `molla chat`: a conversation in the terminal. Each turn re-renders the whole conversation
//! with the chat template and only the new tokens are processed (the KV cache keeps the rest).
//! Commands: /reset forgets the conversation, /exit (or Ctrl-D, or Ctrl-C on an empty line)
//! leaves; Ctrl-C during an answer stops it and keeps what was said.
//!
//! On a terminal a failed turn (say, the conversation outgrew the context) is reported and the
//! chat goes on; with piped input it ends the program with the error, as `molla run` does, and
//! stderr has no banner (only each turn's statistics, unless --quiet).

use super::gen_args::{GenArgs, Session};
use crate::backend::Cache;
use crate::generate::{Finish, cache_len, generate, tokenize_chat};
use crate::repl::{self, Input};
use anyhow::{Result, bail};
use sampler::Sampler;
use std::io::Write;
use template::Message;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: GenArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
}

/// The conversation and what the KV cache holds of it.
struct Chat<'a> {
    a: &'a Args,
    s: Session,
    sampler: Sampler,
    cache: Cache,
    msgs: Vec<Message>,
    /// Tokens the cache holds, to find what a new turn adds.
    seen: Vec<u32>,
}

pub fn run(a: Args) -> Result<()> {
    let s = a.opts.load()?;
    let sampler = a.opts.sampler(s.backend.hparams().n_vocab)?;
    let cache = s.backend.new_cache(s.ctx)?;
    let mut chat = Chat {
        a: &a,
        s,
        sampler,
        cache,
        msgs: Vec::new(),
        seen: Vec::new(),
    };
    chat.reset();
    let mut input = Input::new()?;
    repl::install_interrupt()?;
    if input.is_terminal() && !a.opts.quiet {
        chat.s.announce();
        eprintln!("molla chat: /reset starts over, /exit or Ctrl-D leaves, Ctrl-C stops an answer");
    }
    while let Some(line) = input.read("> ")? {
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                chat.reset();
                continue;
            }
            _ => {}
        }
        chat.msgs.push(Message::new("user", line.as_str()));
        if let Err(e) = chat.turn() {
            if !input.is_terminal() {
                return Err(e);
            }
            // Forget the failed question; the cache is rebuilt on the next turn.
            chat.msgs.pop();
            chat.seen.clear();
            chat.cache.clear();
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        }
    }
    Ok(())
}

impl Chat<'_> {
    fn reset(&mut self) {
        self.msgs = self
            .a
            .system
            .iter()
            .map(|t| Message::new("system", t.as_str()))
            .collect();
        self.seen.clear();
        self.cache.clear();
    }

    /// Answers the last user message, streaming the answer to stdout.
    fn turn(&mut self) -> Result<()> {
        let s = &self.s;
        let ids = tokenize_chat(&s.tok, &s.template.render(&self.msgs, None, true)?);
        if ids.len() >= s.ctx {
            bail!(
                "the conversation ({} tokens) does not fit the context of {} tokens; /reset starts over (or raise --ctx)",
                ids.len(),
                s.ctx
            );
        }
        // Reuse the cached prefix when the new rendering extends it; else start over.
        if !(ids.starts_with(&self.seen) && ids.len() > self.seen.len()) {
            self.cache.clear();
            self.seen.clear();
        }
        let new = &ids[self.seen.len()..];
        let mut answer = String::new();
        let mut stdout = std::io::stdout().lock();
        let answering = repl::answering();
        let result = generate(
            &s.backend,
            &mut self.cache,
            s.ctx,
            &s.tok,
            &mut self.sampler,
            new,
            self.a.opts.limits(s, Some(&repl::CANCEL)),
            |t| {
                answer.push_str(t);
                stdout.write_all(t.as_bytes())?;
                stdout.flush()?;
                Ok(())
            },
        );
        drop(answering);
        let (out, stats) = result?;
        writeln!(stdout)?;
        stdout.flush()?;
        if stats.finish == Finish::Cancelled {
            eprintln!("[stopped]");
        }
        if !self.a.opts.quiet {
            eprintln!("[{}]", stats.summary());
        }
        // The cache holds the prompt and the answer tokens that were run (after a stop string,
        // the length limit or a cancellation the last sampled token has not been).
        let ran = cache_len(&self.cache)
            .saturating_sub(ids.len())
            .min(out.len());
        self.seen = ids;
        self.seen.extend(&out[..ran]);
        // A stopped answer stays in the conversation as far as it went.
        self.msgs.push(Message::new("assistant", answer.as_str()));
        Ok(())
    }
}
