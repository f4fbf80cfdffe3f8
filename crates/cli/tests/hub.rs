//! `--model hf:owner/repo[:file]` against a mock hub: a std::net::TcpListener thread serving the
//! model API's JSON and a tiny synthetic GGUF, with 404s, Range requests and a connection that
//! drops mid-file. The binary finds it through HF_ENDPOINT and caches under MOLLA_MODELS.

mod common;

use common::{assert_error, molla, scratch, text, tiny_chat_model};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

/// One request the mock hub saw.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    range: Option<String>,
    auth: Option<String>,
}

#[derive(Default)]
struct Site {
    /// `/api/models/owner/repo` → JSON.
    api: HashMap<String, String>,
    /// `/owner/repo/resolve/main/file` → bytes.
    files: HashMap<String, Vec<u8>>,
    /// Drop the connection after this many body bytes on the first file request.
    drop_first_at: Option<usize>,
}

struct Hub {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hub {
    fn start(site: Site) -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut dropped = false;
            for stream in listener.incoming().flatten() {
                serve(stream, &site, &log, &mut dropped);
            }
        });
        Hub { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn file_requests(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.contains("/resolve/main/"))
            .collect()
    }
}

fn serve(mut stream: TcpStream, site: &Site, log: &Mutex<Vec<Seen>>, dropped: &mut bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
    let range = headers.get("range").cloned();
    log.lock().unwrap().push(Seen {
        path: path.clone(),
        range: range.clone(),
        auth: headers.get("authorization").cloned(),
    });
    let head = |status: &str, extra: &str, len: usize| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\n{extra}Connection: close\r\n\r\n")
    };
    if let Some(json) = site.api.get(&path) {
        let _ = stream
            .write_all(head("200 OK", "Content-Type: application/json\r\n", json.len()).as_bytes());
        let _ = stream.write_all(json.as_bytes());
    } else if let Some(body) = site.files.get(&path) {
        let start = range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
        let (status, extra, part) = match start {
            Some(s) if s < body.len() => (
                "206 Partial Content",
                format!(
                    "Content-Range: bytes {s}-{}/{}\r\n",
                    body.len() - 1,
                    body.len()
                ),
                &body[s..],
            ),
            Some(_) => (
                "416 Range Not Satisfiable",
                format!("Content-Range: bytes */{}\r\n", body.len()),
                &body[..0],
            ),
            None => ("200 OK", String::new(), &body[..]),
        };
        let _ = stream.write_all(head(status, &extra, part.len()).as_bytes());
        match site.drop_first_at {
            Some(n) if !*dropped => {
                *dropped = true;
                let _ = stream.write_all(&part[..n.min(part.len())]);
                let _ = stream.flush();
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            _ => {
                let _ = stream.write_all(part);
            }
        }
    } else {
        let _ = stream.write_all((head("404 Not Found", "", 9) + "not found").as_bytes());
    }
    let _ = stream.flush();
}

fn api_json(files: &[&str]) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|f| format!(r#"{{"rfilename":"{f}"}}"#))
        .collect();
    format!(r#"{{"id":"o/r","siblings":[{}]}}"#, list.join(","))
}

/// `molla run --model REF` against `hub`, caching in `models`.
fn run(hub: &str, models: &Path, reference: &str, env: &[(&str, &str)]) -> Output {
    molla()
        .args([
            "run", "--model", reference, "--device", "cpu", "--temp", "0", "-n", "4", "hi",
        ])
        .env("HF_ENDPOINT", hub)
        .env("MOLLA_MODELS", models)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn assert_ok(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
}

fn cached(models: &Path, file: &str) -> PathBuf {
    models.join("hf/o/r").join(file)
}

#[test]
fn downloads_a_named_file_once() {
    let model = tiny_chat_model(None);
    let hub = Hub::start(Site {
        files: HashMap::from([("/o/r/resolve/main/tiny.gguf".into(), model.clone())]),
        ..Site::default()
    });
    let models = scratch("hub-named");
    assert_ok(&run(&hub.url, &models, "hf:o/r:tiny.gguf", &[]));
    assert_eq!(std::fs::read(cached(&models, "tiny.gguf")).unwrap(), model);
    assert!(!cached(&models, "tiny.gguf.partial").exists());
    assert_eq!(hub.seen().len(), 1, "{:?}", hub.seen());
    // Cached: no request the second time.
    assert_ok(&run(&hub.url, &models, "hf:o/r:tiny.gguf", &[]));
    assert_eq!(hub.seen().len(), 1, "{:?}", hub.seen());
}

#[test]
fn picks_the_q4_k_m_file_and_sends_the_token() {
    let model = tiny_chat_model(None);
    let site = Site {
        api: HashMap::from([(
            "/api/models/o/r".into(),
            api_json(&["README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf"]),
        )]),
        files: HashMap::from([("/o/r/resolve/main/m-Q4_K_M.gguf".into(), model.clone())]),
        ..Site::default()
    };
    let hub = Hub::start(site);
    let models = scratch("hub-pick");
    assert_ok(&run(
        &hub.url,
        &models,
        "hf:o/r",
        &[("HF_TOKEN", "secret-token")],
    ));
    assert_eq!(
        std::fs::read(cached(&models, "m-Q4_K_M.gguf")).unwrap(),
        model
    );
    let seen = hub.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(s.auth.as_deref(), Some("Bearer secret-token"), "{s:?}");
    }
    // Offline afterwards: the cached file answers the same reference.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert_ok(&run(&format!("http://{dead}"), &models, "hf:o/r", &[]));
}

#[test]
fn several_files_and_no_q4_k_m_lists_the_candidates() {
    let site = Site {
        api: HashMap::from([(
            "/api/models/o/r".into(),
            api_json(&["m-Q8_0.gguf", "m-F16.gguf", "x.txt"]),
        )]),
        ..Site::default()
    };
    let hub = Hub::start(site);
    let out = run(&hub.url, &scratch("hub-ambiguous"), "hf:o/r", &[]);
    assert_error(&out, "m-Q8_0.gguf, m-F16.gguf", "ambiguous");
    assert!(text(&out.stderr).contains("hf:o/r:FILE"));
}

#[test]
fn missing_file_and_repo_are_404() {
    let hub = Hub::start(Site::default());
    let models = scratch("hub-404");
    let out = run(&hub.url, &models, "hf:o/r:missing.gguf", &[]);
    assert_error(&out, "HTTP 404", "missing file");
    assert!(
        !cached(&models, "missing.gguf").exists()
            && !cached(&models, "missing.gguf.partial").exists()
    );
    assert_error(
        &run(&hub.url, &models, "hf:o/nosuch", &[]),
        "HTTP 404",
        "missing repo",
    );
}

#[test]
fn offline_is_a_clear_error() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{dead}");
    let models = scratch("hub-offline");
    assert_error(
        &run(&url, &models, "hf:o/r:m.gguf", &[]),
        "cannot reach",
        "file",
    );
    assert_error(
        &run(&url, &models, "hf:o/r", &[]),
        "cannot reach",
        "file list",
    );
}

#[test]
fn resumes_after_a_dropped_connection() {
    let model = tiny_chat_model(None);
    let half = model.len() / 2;
    let site = Site {
        files: HashMap::from([("/o/r/resolve/main/m.gguf".into(), model.clone())]),
        drop_first_at: Some(half),
        ..Site::default()
    };
    let hub = Hub::start(site);
    let models = scratch("hub-drop");
    assert_ok(&run(&hub.url, &models, "hf:o/r:m.gguf", &[]));
    assert_eq!(std::fs::read(cached(&models, "m.gguf")).unwrap(), model);
    let reqs = hub.file_requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].range, None);
    assert_eq!(
        reqs[1].range.as_deref(),
        Some(format!("bytes={half}-").as_str())
    );
}

#[test]
fn resumes_a_partial_file_left_by_an_earlier_run() {
    let model = tiny_chat_model(None);
    let hub = Hub::start(Site {
        files: HashMap::from([("/o/r/resolve/main/m.gguf".into(), model.clone())]),
        ..Site::default()
    });
    let models = scratch("hub-partial");
    std::fs::create_dir_all(models.join("hf/o/r")).unwrap();
    std::fs::write(cached(&models, "m.gguf.partial"), &model[..1000]).unwrap();
    assert_ok(&run(&hub.url, &models, "hf:o/r:m.gguf", &[]));
    assert_eq!(std::fs::read(cached(&models, "m.gguf")).unwrap(), model);
    let reqs = hub.file_requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].range.as_deref(), Some("bytes=1000-"));

    // A partial file longer than the real one: the server says 416 and the download restarts.
    let models = scratch("hub-partial-long");
    std::fs::create_dir_all(models.join("hf/o/r")).unwrap();
    std::fs::write(
        cached(&models, "m.gguf.partial"),
        vec![0u8; model.len() + 10],
    )
    .unwrap();
    assert_ok(&run(&hub.url, &models, "hf:o/r:m.gguf", &[]));
    assert_eq!(std::fs::read(cached(&models, "m.gguf")).unwrap(), model);
}
