//! `molla serve` as a process: flag errors, and SIGTERM while a request runs (the request is
//! answered in full, then the server exits 0). The HTTP API itself is tested in crates/server
//! and, through the official SDKs, by scripts/sdk_tests.py.
#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn serve_refuses_bad_flags() {
    let out = common::molla()
        .args(["serve", "--model", "/nonexistent.gguf"])
        .output()
        .unwrap();
    common::assert_error(&out, "nonexistent", "missing model");
    let m = common::smollm2();
    let out = common::molla()
        .args(["serve", "--model", m.to_str().unwrap(), "--parallel", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(common::text(&out.stderr).contains("--parallel"));
}

#[test]
fn sigterm_finishes_the_running_request_then_exits() {
    let m = common::smollm2();
    let mut child = common::molla()
        .args([
            "serve",
            "--model",
            m.to_str().unwrap(),
            "--port",
            "0",
            "--device",
            "cpu",
        ])
        .args(["--ctx", "512", "--parallel", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut port = None;
    for _ in 0..20 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("molla: listening on http://") {
            port = rest.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            break;
        }
    }
    let port = port.expect("no 'listening on' line");
    // 300 tokens (end-of-generation banned): still running when SIGTERM comes
    let body = r#"{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":300,"ignore_eos":true}"#;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut resp = String::new();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("Paris"), "{resp}");
    assert!(resp.contains(r#""completion_tokens":300"#), "{resp}");
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    assert!(rest.contains("drained"), "{rest}");
}
