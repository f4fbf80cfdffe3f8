//! 1,000 malformed HTTP requests to a live `molla serve` (SmolLM2 on the CPU): bit-flipped,
//! truncated, oversized and wrong-typed JSON, non-JSON bodies under wrong content types,
//! invalid UTF-8, huge numbers, deep nesting, broken HTTP framing. Every one must get a 4xx
//! (never a 5xx, never a hang), and a correct request asked every 100 malformed ones must keep
//! getting the same correct answer.
#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A `molla serve` child, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Server {
    let m = common::smollm2();
    let mut child = common::molla()
        .args(["serve", "--model", m.to_str().unwrap(), "--port", "0"])
        .args(["--device", "cpu", "--ctx", "512", "--threads", "2"])
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
    // keep draining stderr (request logs) so the server never blocks on a full pipe
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Server {
        child,
        port: port.expect("no 'listening on' line"),
    }
}

/// One request's bytes: the head's extra header lines and the body, or raw bytes.
enum Req {
    Http {
        method: &'static str,
        path: &'static str,
        content_type: Option<&'static str>,
        body: Vec<u8>,
    },
    /// Sent as is (broken framing); the server must answer 400 and close.
    Raw(Vec<u8>),
    /// Announces `len` bytes but sends a first chunk only: the body limit must answer first.
    Oversized { path: &'static str, len: usize },
}

/// Sends `req` on a fresh connection: the status and body of the answer.
fn send(port: u16, req: &Req) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    let bytes = match req {
        Req::Http {
            method,
            path,
            content_type,
            body,
        } => {
            let mut head =
                format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
            if let Some(ct) = content_type {
                head.push_str(&format!("content-type: {ct}\r\n"));
            }
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut b = head.into_bytes();
            b.extend_from_slice(body);
            b
        }
        Req::Raw(b) => b.clone(),
        Req::Oversized { path, len } => {
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
                 content-type: application/json\r\ncontent-length: {len}\r\n\r\n{{\"prompt\": \""
            );
            head.into_bytes()
        }
    };
    // The server may answer and close before reading everything (413, 400): a failed write
    // is fine, the answer is what counts.
    let _ = s.write_all(&bytes);
    let mut resp = Vec::new();
    let t0 = Instant::now();
    let _ = s.read_to_end(&mut resp);
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "no answer within 20 s"
    );
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// Bodies of valid requests to mutate: (path, body, whether keys below the top level may be
/// flipped: not on chat, whose messages pass unknown keys through to the template).
fn bases() -> Vec<(&'static str, String, bool)> {
    let chat = r#"{"model":"smollm2","messages":[{"role":"user","content":"Hi there"}],"max_tokens":4,"temperature":0}"#;
    let completion = r#"{"prompt":"Hello","max_tokens":4,"temperature":0,"top_p":0.9}"#;
    let messages = r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}"#;
    let count = r#"{"messages":[{"role":"user","content":"Hi"}]}"#;
    vec![
        ("/v1/chat/completions", chat.into(), false),
        ("/v1/completions", completion.into(), true),
        ("/v1/messages", messages.into(), true),
        ("/v1/messages/count_tokens", count.into(), true),
        ("/tokenize", r#"{"content":"Hello world"}"#.into(), true),
        ("/detokenize", r#"{"tokens":[1,2,3]}"#.into(), true),
        ("/v1/embeddings", r#"{"input":"Hello"}"#.into(), true),
    ]
}

/// Byte positions where one flipped bit surely breaks the request: JSON punctuation outside
/// strings, and the letters of object keys (`deep`: at any depth, else top-level keys only).
fn flip_sites(body: &[u8], deep: bool) -> Vec<usize> {
    let mut sites = Vec::new();
    let (mut in_str, mut depth, mut str_start) = (false, 0usize, 0usize);
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
                let is_key = body.get(i + 1) == Some(&b':');
                if is_key && (deep || depth == 1) {
                    sites.extend(str_start..i);
                }
            }
        } else {
            match c {
                b'"' => {
                    in_str = true;
                    str_start = i + 1;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
            if b"{}[]:,\"".contains(&c) {
                sites.push(i);
            }
        }
        i += 1;
    }
    sites
}

const WRONG_TYPES: [(&str, &str); 24] = [
    ("/v1/chat/completions", r#"{"messages":"hi"}"#),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":"5"}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":-1}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"stop":5}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":5,"content":"hi"}]}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":{"a":1}}]}"#,
    ),
    ("/v1/chat/completions", r#"{"messages":[]}"#),
    ("/v1/chat/completions", r#"{"messages":null}"#),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"logit_bias":[]}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"tools":"x"}"#,
    ),
    ("/v1/completions", r#"{"prompt":{}}"#),
    ("/v1/completions", r#"{"prompt":[1.5,2]}"#),
    ("/v1/completions", r#"{"prompt":"hi","logprobs":true}"#),
    ("/v1/completions", r#"{"prompt":["a","b"]}"#),
    (
        "/v1/messages",
        r#"{"model":"m","max_tokens":"4","messages":[]}"#,
    ),
    (
        "/v1/messages",
        r#"{"model":"m","max_tokens":4,"messages":[{"role":"system","content":"x"}]}"#,
    ),
    (
        "/v1/messages",
        r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image"}]}]}"#,
    ),
    ("/tokenize", r#"{"content":["a"]}"#),
    ("/detokenize", r#"{"tokens":["a"]}"#),
    ("/detokenize", r#"{"tokens":[-1]}"#),
    ("/v1/embeddings", r#"{"input":{}}"#),
    (
        "/v1/embeddings",
        r#"{"input":"hi","encoding_format":"hex"}"#,
    ),
];

const HUGE_NUMBERS: [(&str, &str); 12] = [
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1e400}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999999999999999999}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"temperature":1e39}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"top_logprobs":4294967296,"logprobs":true}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"seed":-1}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"n":1000000}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"99999999":1}}"#,
    ),
    (
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"top_p":1e308}"#,
    ),
    ("/v1/completions", r#"{"prompt":[4294967295]}"#),
    ("/v1/completions", r#"{"prompt":"hi","logprobs":1000000}"#),
    ("/detokenize", r#"{"tokens":[4294967296]}"#),
    (
        "/v1/messages",
        r#"{"model":"m","max_tokens":1e30,"messages":[{"role":"user","content":"hi"}]}"#,
    ),
];

const NOT_JSON: [(&str, &[u8]); 8] = [
    (
        "application/x-www-form-urlencoded",
        b"prompt=hello&max_tokens=4",
    ),
    (
        "multipart/form-data; boundary=X",
        b"--X\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi\r\n--X--\r\n",
    ),
    ("text/plain", b"hello there"),
    ("application/xml", b"<prompt>hi</prompt>"),
    ("application/json", b""),
    ("application/json", b"null"),
    ("application/octet-stream", b"\x00\x01\x02\xff"),
    ("application/json", b"[1,2,3]"),
];

/// The `i`-th malformed request.
fn malformed(rng: &mut Rng, i: usize) -> Req {
    let post = |path: &'static str, body: Vec<u8>| Req::Http {
        method: "POST",
        path,
        content_type: Some("application/json"),
        body,
    };
    let bases = bases();
    let (path, base, deep) = &bases[rng.below(bases.len())];
    let path: &'static str = path;
    match i % 10 {
        0..=2 => {
            let mut b = base.clone().into_bytes();
            let sites = flip_sites(&b, *deep);
            let at = sites[rng.below(sites.len())];
            b[at] ^= 1 << rng.below(8);
            post(path, b)
        }
        3 => post(path, base.as_bytes()[..rng.below(base.len())].to_vec()),
        4 => {
            let (p, b) = WRONG_TYPES[rng.below(WRONG_TYPES.len())];
            post(p, b.as_bytes().to_vec())
        }
        5 => {
            let (p, b) = HUGE_NUMBERS[rng.below(HUGE_NUMBERS.len())];
            post(p, b.as_bytes().to_vec())
        }
        6 => {
            // invalid UTF-8 inside a string, or a lone surrogate escape
            let mut b = base.clone().into_bytes();
            let q = b.iter().rposition(|&c| c == b'"').unwrap();
            let bad: &[u8] = [
                &b"\xff"[..],
                b"\xc3",
                b"\xed\xa0\x80",
                b"\\ud800x",
                b"\\x41",
            ][rng.below(5)];
            b.splice(q..q, bad.iter().copied());
            post(path, b)
        }
        7 => {
            // deep nesting, in a field that takes any JSON (tools, metadata) or where an
            // object is expected
            let depth = [200, 1000, 100_000][rng.below(3)];
            let (open, close) = ("[".repeat(depth), "]".repeat(depth));
            let body = match rng.below(3) {
                0 => format!(
                    r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":{open}{close}}}"#
                ),
                1 => format!(
                    r#"{{"model":"m","max_tokens":1,"metadata":{open}{close},"messages":[]}}"#
                ),
                _ => format!("{open}{close}"),
            };
            let p = ["/v1/chat/completions", "/v1/messages", "/v1/completions"][rng.below(3)];
            post(p, body.into_bytes())
        }
        8 => {
            let (ct, b) = NOT_JSON[rng.below(NOT_JSON.len())];
            Req::Http {
                method: "POST",
                path,
                content_type: Some(ct),
                body: b.to_vec(),
            }
        }
        _ => match rng.below(8) {
            0 => Req::Oversized {
                path,
                len: (4 << 20) + 1 + rng.below(1 << 30),
            },
            1 => Req::Raw(b"GARBAGE\r\n\r\n".to_vec()),
            2 => Req::Raw(
                b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n".to_vec(),
            ),
            3 => Req::Raw(
                b"POST /tokenize HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n".to_vec(),
            ),
            4 => Req::Http {
                method: "GET",
                path,
                content_type: None,
                body: Vec::new(),
            },
            5 => Req::Http {
                method: "DELETE",
                path: "/v1/models",
                content_type: None,
                body: Vec::new(),
            },
            6 => post("/v1/nope", base.clone().into_bytes()),
            _ => {
                // a prompt longer than the 512-token context
                let long = "word ".repeat(2000);
                post(
                    "/v1/completions",
                    format!(r#"{{"prompt":"{long}","max_tokens":1}}"#).into_bytes(),
                )
            }
        },
    }
}

fn describe(req: &Req) -> String {
    match req {
        Req::Http {
            method, path, body, ..
        } => format!(
            "{method} {path} {:?}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        ),
        Req::Raw(b) => format!("raw {:?}", String::from_utf8_lossy(b)),
        Req::Oversized { path, len } => format!("POST {path} announcing {len} bytes"),
    }
}

/// The correct request and a check of its answer.
fn check_correct(port: u16, first: &mut Option<String>) {
    let body = br#"{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":12}"#;
    let req = Req::Http {
        method: "POST",
        path: "/v1/chat/completions",
        content_type: Some("application/json"),
        body: body.to_vec(),
    };
    let (status, text) = send(port, &req);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let answer = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(answer.contains("Paris"), "{answer}");
    match first {
        None => *first = Some(answer),
        Some(a) => assert_eq!(&answer, a, "greedy answer changed"),
    }
}

#[test]
fn thousand_malformed_requests_get_4xx() {
    let server = serve();
    let t0 = Instant::now();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut first = None;
    let mut counts = std::collections::BTreeMap::new();
    check_correct(server.port, &mut first);
    for i in 0..1000 {
        let req = malformed(&mut rng, i);
        let (status, body) = send(server.port, &req);
        assert!(
            (400..500).contains(&status),
            "request {i} ({}) got {status}: {body}",
            describe(&req)
        );
        if !matches!(req, Req::Raw(_)) {
            let v: Result<serde_json::Value, _> = serde_json::from_str(&body);
            assert!(
                v.is_ok(),
                "request {i} ({}): body is not JSON: {body:?}",
                describe(&req)
            );
        }
        *counts.entry(status).or_insert(0) += 1;
        if i % 100 == 99 {
            check_correct(server.port, &mut first);
        }
    }
    eprintln!("statuses: {counts:?} in {:.1?}", t0.elapsed());
}
