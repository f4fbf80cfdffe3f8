//! The server's limits on clients: generation requests in flight per client (429), a
//! request's headers and body within `request_timeout` (disconnect, 408), connections open at
//! once; and that none of them cuts a long generation or stream. The connection-level ones
//! run a real `server::serve` on a loopback port.

mod common;

use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use common::tiny_chat_model;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

fn state(cfg: server::Config) -> server::AppState {
    let file = gguf::GgufFile::from_bytes(tiny_chat_model(None)).unwrap();
    let model = model::Model::from_file(file).unwrap();
    let ctx = if cfg.ctx == 0 { 256 } else { cfg.ctx };
    let cfg = server::Config { ctx, ..cfg };
    Arc::new(server::State::from_model(model, "tiny".into(), &cfg).unwrap())
}

fn chat(stream: bool, max_tokens: u32) -> String {
    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
           "temperature": 0, "stream": stream, "ignore_eos": true})
    .to_string()
}

/// A POST from `ip` (as `serve` marks each request with its peer), with `headers`.
fn from(ip: [u8; 4], path: &str, body: String, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::post(path).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(Body::from(body)).unwrap();
    let addr = SocketAddr::from((ip, 40000));
    req.extensions_mut().insert(ConnectInfo(addr));
    req
}

async fn call(app: &axum::Router, req: Request<Body>) -> Response<Body> {
    app.clone().oneshot(req).await.unwrap()
}

async fn json_of(resp: Response<Body>) -> (StatusCode, Value) {
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_client_over_its_in_flight_cap_gets_429_in_each_apis_shape() {
    let st = state(server::Config {
        max_per_client: 2,
        ..server::Config::default()
    });
    let app = server::app(st.clone());
    const A: [u8; 4] = [10, 0, 0, 1];
    // two streams from A, not yet read to the end: both in flight
    let s1 = call(&app, from(A, "/v1/chat/completions", chat(true, 4), &[])).await;
    let s2 = call(
        &app,
        from(
            A,
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 4,
        "stream": true})
            .to_string(),
            &[],
        ),
    )
    .await;
    assert_eq!((s1.status(), s2.status()), (StatusCode::OK, StatusCode::OK));
    assert_eq!(st.client_slots.in_flight("ip:10.0.0.1"), 2);
    // a third from A: 429, OpenAI's shape...
    let (s, v) =
        json_of(call(&app, from(A, "/v1/chat/completions", chat(false, 4), &[])).await).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 2")
    );
    // ...and Anthropic's on /v1/messages
    let msg =
        json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let (s, v) = json_of(call(&app, from(A, "/v1/messages", msg.to_string(), &[])).await).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    // routes that do not generate are not counted; another client is not affected
    let (s, _) = json_of(
        call(
            &app,
            from(A, "/tokenize", json!({"content": "a"}).to_string(), &[]),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = json_of(
        call(
            &app,
            from([10, 0, 0, 2], "/v1/chat/completions", chat(false, 4), &[]),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // a stream read to its end gives its slot back; so does one dropped unread
    let text = to_bytes(s1.into_body(), usize::MAX).await.unwrap();
    assert!(String::from_utf8_lossy(&text).contains("[DONE]"));
    drop(s2);
    assert_eq!(st.client_slots.in_flight("ip:10.0.0.1"), 0);
    for _ in 0..3 {
        let (s, v) =
            json_of(call(&app, from(A, "/v1/chat/completions", chat(false, 4), &[])).await).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
}

#[tokio::test]
async fn with_an_api_key_the_key_is_the_client() {
    let app = server::app(state(server::Config {
        max_per_client: 1,
        api_key: Some("sekrit".into()),
        ..server::Config::default()
    }));
    let key = [("authorization", "Bearer sekrit")];
    let held = call(
        &app,
        from([10, 0, 0, 1], "/v1/chat/completions", chat(true, 4), &key),
    )
    .await;
    assert_eq!(held.status(), StatusCode::OK);
    // the same key from another address is the same client
    let other = from([10, 0, 0, 9], "/v1/chat/completions", chat(false, 4), &key);
    let (s, v) = json_of(call(&app, other).await).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    // a wrong key is refused before it is counted
    let wrong = from(
        [10, 0, 0, 9],
        "/v1/chat/completions",
        chat(false, 4),
        &[("x-api-key", "no")],
    );
    assert_eq!(call(&app, wrong).await.status(), StatusCode::UNAUTHORIZED);
    drop(held);
    let again = from([10, 0, 0, 9], "/v1/chat/completions", chat(false, 4), &key);
    assert_eq!(call(&app, again).await.status(), StatusCode::OK);
}

/// `server::serve` over `cfg` on a loopback port, on its own runtime; stops when dropped.
struct Live {
    port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn live(cfg: server::Config) -> Live {
    let st = state(cfg);
    let (rt, listener, port) = common::runtime_and_listener();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        rt.block_on(server::serve(listener, st, async {
            let _ = stopped.await;
        }))
        .unwrap();
    });
    Live {
        port,
        stop: Some(stop),
        thread: Some(thread),
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the server closes (or the read timeout): what came, and how long it took.
fn read_all(s: &mut TcpStream) -> (String, Duration) {
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    (String::from_utf8_lossy(&buf).into_owned(), t0.elapsed())
}

fn http_post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn slow_headers_are_cut_off() {
    let srv = live(server::Config {
        request_timeout: Duration::from_millis(300),
        ..server::Config::default()
    });
    let mut s = connect(srv.port);
    s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n").unwrap();
    let (text, took) = read_all(&mut s);
    assert!(took < Duration::from_secs(3), "still open after {took:?}");
    assert!(!text.contains("200 OK"), "{text}");
    // an idle keep-alive connection is closed the same way
    let mut s = connect(srv.port);
    s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let (text, took) = read_all(&mut s);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_slow_body_gets_408() {
    let srv = live(server::Config {
        request_timeout: Duration::from_millis(300),
        ..server::Config::default()
    });
    for path in ["/v1/chat/completions", "/v1/messages", "/tokenize"] {
        let mut s = connect(srv.port);
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: 100\r\n\r\n{{\"messages\": "
        );
        s.write_all(head.as_bytes()).unwrap();
        let (text, took) = read_all(&mut s);
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        assert!(took < Duration::from_secs(3), "{path}: {took:?}");
        let body: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error", "{body}");
        } else {
            assert_eq!(body["error"]["code"], "request_timeout", "{body}");
        }
    }
}

#[test]
fn connections_over_the_limit_wait_for_one_to_close() {
    let srv = live(server::Config {
        max_connections: 2,
        ..server::Config::default()
    });
    let idle1 = connect(srv.port);
    let _idle2 = connect(srv.port);
    std::thread::sleep(Duration::from_millis(200));
    let mut third = connect(srv.port);
    third
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = third.read(&mut byte);
    assert!(
        early.is_err(),
        "answered while two connections were open: {early:?}"
    );
    drop(idle1);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (text, _) = read_all(&mut third);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn generation_and_streams_are_never_timed() {
    // a request timeout far shorter than the answers: one slot, so each request waits for
    // the ones before it (1500 tokens each); every answer must still come whole. (Long enough
    // that a client thread descheduled on a loaded 2-core machine still gets its headers in:
    // at 40 ms the header timer dropped some under load.)
    let timeout = Duration::from_millis(150);
    let srv = live(server::Config {
        request_timeout: timeout,
        parallel: 1,
        ctx: 2048,
        ..server::Config::default()
    });
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let port = srv.port;
            std::thread::spawn(move || {
                let mut s = connect(port);
                // the last answers come after all the others' (seconds on a loaded machine)
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let stream = i % 2 == 0;
                s.write_all(http_post("/v1/chat/completions", &chat(stream, 1500)).as_bytes())
                    .unwrap();
                let (text, took) = read_all(&mut s);
                (stream, text, took)
            })
        })
        .collect();
    let mut longest = Duration::ZERO;
    for c in clients {
        let (stream, text, took) = c.join().unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        if stream {
            assert!(text.contains("data: [DONE]"), "{text}");
        } else {
            assert!(text.contains(r#""completion_tokens":1500"#), "{text}");
        }
        longest = longest.max(took);
    }
    assert!(
        longest > 3 * timeout,
        "the longest answer took {longest:?}: too quick to test anything"
    );
    // a client slow to read a stream is not cut either
    let mut s = connect(srv.port);
    s.write_all(http_post("/v1/chat/completions", &chat(true, 200)).as_bytes())
        .unwrap();
    std::thread::sleep(5 * timeout);
    let (text, _) = read_all(&mut s);
    assert!(text.contains("data: [DONE]"), "{text}");
}
