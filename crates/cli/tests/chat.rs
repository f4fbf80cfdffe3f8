//! `molla chat` on the real SmolLM2-135M-Instruct with greedy sampling: a 3-turn conversation
//! through a pty (rustyline's line editor on a terminal), Ctrl-C stopping an answer but not the
//! program, and the same conversation with piped stdin.

mod common;

use common::{molla, smollm2, text};
use rexpect::process::WaitStatus;
use rexpect::session::{PtySession, spawn_command};
use std::io::Write;
use std::process::Stdio;

const TURNS: [(&str, &str); 3] = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Italy?", "Rome"),
];

fn spawn_chat(extra: &[&str]) -> PtySession {
    let m = smollm2();
    let mut cmd = molla();
    cmd.args([
        "chat",
        "--model",
        m.to_str().unwrap(),
        "--device",
        "cpu",
        "--temp",
        "0",
    ])
    .args(extra);
    spawn_command(cmd, Some(60_000)).unwrap()
}

/// Types `line` and presses Enter (a carriage return, as a terminal sends it).
fn enter(p: &mut PtySession, line: &str) {
    p.send(line).unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
}

fn assert_exited_ok(p: &PtySession) {
    match p.process().wait().unwrap() {
        WaitStatus::Exited(_, 0) => {}
        s => panic!("molla chat ended with {s:?}"),
    }
}

#[test]
fn three_turns_through_a_pty() {
    let mut p = spawn_chat(&["-n", "48"]);
    p.exp_string("> ").unwrap();
    for (question, answer) in TURNS {
        enter(&mut p, question);
        let said = p
            .exp_string(answer)
            .unwrap_or_else(|e| panic!("no {answer:?} after {question:?}: {e}"));
        assert!(!said.contains("error"), "{said}");
        p.exp_string("> ").unwrap();
    }
    enter(&mut p, "/exit");
    p.exp_eof().unwrap();
    assert_exited_ok(&p);
}

#[test]
fn ctrl_c_stops_the_answer_not_the_program() {
    let mut p = spawn_chat(&["-n", "1000"]);
    p.exp_string("> ").unwrap();
    enter(&mut p, "Write a long story about a dragon.");
    p.exp_string("Once upon a time").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("[stopped]").unwrap();
    p.exp_string("finished by Cancelled").unwrap();
    p.exp_string("> ").unwrap();
    // The conversation goes on, the stopped answer kept in it.
    enter(&mut p, TURNS[0].0);
    p.exp_string(TURNS[0].1).unwrap();
    p.exp_string("> ").unwrap();
    // Ctrl-C clears a line being typed; on an empty line it leaves.
    p.send("half a question").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("> ").unwrap();
    p.send_control('c').unwrap();
    p.exp_eof().unwrap();
    assert_exited_ok(&p);
}

#[test]
fn ctrl_d_leaves() {
    let mut p = spawn_chat(&["-n", "8"]);
    p.exp_string("> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    assert_exited_ok(&p);
}

#[test]
fn three_turns_from_piped_stdin() {
    let m = smollm2();
    let mut child = molla()
        .args([
            "chat",
            "--model",
            m.to_str().unwrap(),
            "--device",
            "cpu",
            "--temp",
            "0",
            "-n",
            "48",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = TURNS
        .iter()
        .map(|(q, _)| format!("{q}\n"))
        .collect::<String>()
        + "/exit\nnot read\n";
    // It stops reading at /exit and may be gone before the last line: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let answers: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(answers.len(), 3, "one answer line per turn: {stdout:?}");
    for ((_, want), got) in TURNS.iter().zip(&answers) {
        assert!(got.contains(want), "{got:?} lacks {want:?}");
    }
    // Later turns reuse the KV cache: only the new turn's tokens are processed, fewer than the
    // first turn's (which include the template's default system prompt).
    let err = text(&out.stderr);
    let prompts: Vec<usize> = err
        .lines()
        .filter_map(|l| {
            l.strip_prefix("[prompt ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(prompts.len(), 3, "{err}");
    assert!(
        prompts[1] < prompts[0] && prompts[2] < prompts[0],
        "prompt tokens per turn: {prompts:?}"
    );
}
