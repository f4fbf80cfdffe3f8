//! Target `http`: one request through the server's axum Router over a tiny synthetic model
//! (`model::synth::chat_model`, ChatML, 256-token context), as `tower::ServiceExt::oneshot`.
//!
//! Input: byte 0 picks the route and method ([`ROUTES`]), byte 1 the content type and
//! headers, the rest is the body. Checks beyond "no panic": no answer is a 5xx, an error
//! answer is JSON, a streamed answer carries no error event, and every answer (streams
//! included) is complete within 20 s.

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Method, Request};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower::ServiceExt;

/// (method, path) by the input's first byte.
pub const ROUTES: [(&str, &str); 17] = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/v1/embeddings"),
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/tiny"),
    ("GET", "/metrics"),
    ("GET", "/v1/chat/completions"),
    ("POST", "/v1/models/tiny"),
    ("POST", "/nope"),
    ("POST", "/v1/responses"),
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
];

const CONTENT_TYPES: [Option<&str>; 6] = [
    Some("application/json"),
    Some("application/json; charset=utf-8"),
    None,
    Some("text/plain"),
    Some("application/x-www-form-urlencoded"),
    Some("multipart/form-data; boundary=x"),
];

struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let bytes = model::synth::chat_model(None).expect("synthetic model");
        let file = gguf::GgufFile::from_bytes(bytes).expect("synthetic model parses");
        let model = model::Model::from_file(file).expect("synthetic model binds");
        let cfg = server::Config {
            ctx: 256,
            body_limit: 1 << 20,
            ..server::Config::default()
        };
        let state = server::State::from_model(model, "tiny".into(), &cfg).expect("server state");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        Fixture {
            rt,
            app: server::app(Arc::new(state)),
        }
    })
}

/// The request `data` describes.
pub fn request(data: &[u8]) -> Option<Request<Body>> {
    let [route, flags, body @ ..] = data else {
        return None;
    };
    let (method, path) = ROUTES[*route as usize % ROUTES.len()];
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).ok()?)
        .uri(path);
    if let Some(ct) = CONTENT_TYPES[(*flags & 7) as usize % CONTENT_TYPES.len()] {
        req = req.header("content-type", ct);
    }
    if flags & 8 != 0 {
        req = req.header("authorization", "Bearer nobody");
    }
    req.body(Body::from(body.to_vec())).ok()
}

pub fn run(data: &[u8]) {
    let Some(req) = request(data) else {
        return;
    };
    let f = fixture();
    f.rt.block_on(async {
        let answer = async {
            let resp = f
                .app
                .clone()
                .oneshot(req)
                .await
                .expect("the router is infallible");
            let status = resp.status();
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
            (status, ct, body)
        };
        let (status, ct, body) = tokio::time::timeout(Duration::from_secs(20), answer)
            .await
            .expect("no answer within 20 s");
        let text = String::from_utf8_lossy(&body);
        assert!(!status.is_server_error(), "{status}: {text}");
        if !status.is_success() {
            assert!(ct.starts_with("application/json"), "{status} {ct}: {text}");
            assert!(
                serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
                "{text}"
            );
        } else if ct.starts_with("text/event-stream") {
            assert!(
                !text.contains("\"server_error\"") && !text.contains("\"api_error\""),
                "{text}"
            );
        }
    });
}
