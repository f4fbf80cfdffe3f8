//! Terminal input for `molla chat` and its Ctrl-C handling.
//!
//! On a terminal, lines are read with rustyline (editing, in-memory history); Ctrl-C clears a
//! line being typed and leaves on an empty one, as Ctrl-D does. Otherwise (a pipe or a file)
//! stdin is read line by line with no prompt on stdout.
//!
//! While an answer is being generated the terminal is out of raw mode, so Ctrl-C is a SIGINT:
//! the handler raises [`CANCEL`], which the generation loop checks between tokens. A SIGINT
//! outside an answer ends the program as usual (exit status 130).

use anyhow::Result;
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{
    Behavior, Cmd, ConditionalEventHandler, Config, Editor, Event, EventContext, EventHandler,
    KeyEvent, Movement, RepeatCount,
};
use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};

/// Raised by Ctrl-C while an answer is generated.
pub static CANCEL: AtomicBool = AtomicBool::new(false);
/// Whether an answer is being generated (what Ctrl-C means).
static ANSWERING: AtomicBool = AtomicBool::new(false);

/// Installs the SIGINT handler; call once.
pub fn install_interrupt() -> Result<()> {
    ctrlc::set_handler(|| {
        if ANSWERING.load(Ordering::SeqCst) {
            CANCEL.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    })?;
    Ok(())
}

/// Marks an answer in progress until dropped: Ctrl-C raises [`CANCEL`] meanwhile.
pub struct Answering(());

pub fn answering() -> Answering {
    CANCEL.store(false, Ordering::SeqCst);
    ANSWERING.store(true, Ordering::SeqCst);
    Answering(())
}

impl Drop for Answering {
    fn drop(&mut self) {
        ANSWERING.store(false, Ordering::SeqCst);
    }
}

/// Ctrl-C at the prompt: clear the line if it has text, else interrupt (leave).
struct ClearOrLeave;

impl ConditionalEventHandler for ClearOrLeave {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        if ctx.line().is_empty() {
            None
        } else {
            Some(Cmd::Kill(Movement::WholeLine))
        }
    }
}

/// Where user lines come from.
pub enum Input {
    Editor(Box<Editor<(), DefaultHistory>>),
    Lines(std::io::StdinLock<'static>),
}

impl Input {
    /// An editor when stdin is a terminal, else plain lines.
    pub fn new() -> Result<Input> {
        if !std::io::stdin().is_terminal() {
            return Ok(Input::Lines(std::io::stdin().lock()));
        }
        // PreferTerm: the prompt goes to the terminal even when stdout is redirected.
        let config = Config::builder()
            .auto_add_history(true)
            .behavior(Behavior::PreferTerm)
            .build();
        let mut ed = Editor::with_config(config)?;
        ed.bind_sequence(
            KeyEvent::ctrl('C'),
            EventHandler::Conditional(Box::new(ClearOrLeave)),
        );
        Ok(Input::Editor(Box::new(ed)))
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Input::Editor(_))
    }

    /// The next line without its newline; None at the end (Ctrl-D, Ctrl-C on an empty line,
    /// end of input).
    pub fn read(&mut self, prompt: &str) -> Result<Option<String>> {
        match self {
            Input::Editor(ed) => match ed.readline(prompt) {
                Ok(line) => Ok(Some(line)),
                Err(ReadlineError::Interrupted | ReadlineError::Eof) => Ok(None),
                Err(e) => Err(e.into()),
            },
            Input::Lines(stdin) => {
                let mut buf = Vec::new();
                if stdin.read_until(b'\n', &mut buf)? == 0 {
                    return Ok(None);
                }
                let line = String::from_utf8_lossy(&buf);
                Ok(Some(line.trim_end_matches(['\n', '\r']).to_string()))
            }
        }
    }
}
