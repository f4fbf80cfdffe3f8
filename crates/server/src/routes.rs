//! The router: routes, API-key check, per-client cap, body limit and read timeout, and JSON
//! errors for what the router itself rejects (unknown route, body too large or too slow).

use crate::error::{ApiError, parse_json};
use crate::limits::{self, GENERATION_ROUTES};
use crate::{AppState, anthropic, embeddings, ollama, openai, responses};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tower_http::limit::RequestBodyLimitLayer;

/// The whole HTTP API over `state`.
pub fn app(state: AppState) -> Router {
    let limit = state.body_limit;
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/responses", post(responses::responses))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(ollama::embed))
        .route("/api/embeddings", post(ollama::embeddings))
        .route("/api/tags", get(ollama::tags))
        .route("/api/ps", get(ollama::ps))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Reads a request body; a body over the limit is a 413.
pub fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(),
        _ => ApiError::bad_request(e.body_text(), None),
    })
}

/// The route a path belongs to, as the metrics label it (unknown paths share one label).
fn route_label(path: &str) -> &'static str {
    const ROUTES: [&str; 21] = [
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/api/embeddings",
        "/api/tags",
        "/api/ps",
        "/api/show",
        "/api/version",
        "/health",
        "/metrics",
        "/v1/models",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/embeddings",
        "/tokenize",
        "/detokenize",
        "/v1/models/{id}",
        "other",
    ];
    if let Some(r) = ROUTES.iter().find(|&&r| r == path) {
        return r;
    }
    if path.starts_with("/v1/models/") {
        return "/v1/models/{id}";
    }
    "other"
}

/// Checks the API key (all routes but /health) and the client's in-flight cap (generation
/// routes), reads the body within the request timeout, answers the body limit's plain 413 in
/// JSON, counts the request for /metrics and logs it.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let t0 = std::time::Instant::now();
    let route = route_label(req.uri().path());
    let method = req.method().clone();
    let resp = check(&state, req, next).await;
    state.metrics.request(route, resp.status().as_u16());
    tracing::info!(
        %method,
        route,
        status = resp.status().as_u16(),
        ms = %format_args!("{:.1}", t0.elapsed().as_secs_f64() * 1e3),
        "request"
    );
    resp
}

tokio::task_local! {
    /// The client a generation request comes from, while its handler runs ([`check`]).
    pub(crate) static CLIENT: String;
}

async fn check(state: &AppState, req: Request, next: Next) -> Response {
    let anthropic = req.uri().path().starts_with("/v1/messages");
    let ollama = req.uri().path().starts_with("/api/");
    let flavor = |e: ApiError| match (anthropic, ollama) {
        (true, _) => e.anthropic(),
        (_, true) => e.ollama(),
        _ => e,
    };
    if let Some(key) = &state.api_key
        && req.uri().path() != "/health"
    {
        let h = req.headers();
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = h.get("x-api-key").and_then(|v| v.to_str().ok());
        let matches = |given: Option<&str>| given.is_some_and(|g| same_key(g, key));
        if !matches(bearer) && !matches(x_api_key) {
            return flavor(ApiError::unauthorized()).into_response();
        }
    }
    let (slot, client) = if GENERATION_ROUTES.contains(&req.uri().path()) {
        let client = limits::client_id(&req, state.api_key.is_some());
        match state.client_slots.try_acquire(client.clone()) {
            Some(slot) => (Some(slot), Some(client)),
            None => {
                let max = state.client_slots.max();
                return flavor(ApiError::too_many_requests(max)).into_response();
            }
        }
    } else {
        (None, None)
    };
    let req = match limits::read_body(req, state.body_limit, state.request_timeout).await {
        Ok(req) => req,
        Err(e) => return flavor(e).into_response(),
    };
    // The handler queues its job under the client's name (the engine's fairness).
    let resp = match client {
        Some(c) => CLIENT.scope(c, next.run(req)).await,
        None => next.run(req).await,
    };
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_json {
        return flavor(ApiError::too_large()).into_response();
    }
    match slot {
        Some(slot) => limits::hold_until_sent(resp, slot),
        None => resp,
    }
}

async fn method_not_allowed(req: Request) -> ApiError {
    let e = ApiError::method_not_allowed(format!(
        "{} is not allowed on {}",
        req.method(),
        req.uri().path()
    ));
    if req.uri().path().starts_with("/v1/messages") {
        e.anthropic()
    } else {
        e
    }
}

/// Whether `given` is `key`, in time that depends on their lengths only (no early exit on the
/// first differing byte, which would let a client guess the key byte by byte).
fn same_key(given: &str, key: &str) -> bool {
    let (a, b) = (given.as_bytes(), key.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(
        format!("no route {} {}", req.method(), req.uri().path()),
        "unknown_url",
    )
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

fn model_json(state: &AppState) -> serde_json::Value {
    json!({
        "id": state.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "molla",
        "meta": {"n_ctx": state.ctx, "n_vocab": state.tok.n_vocab(), "device": state.device_name},
    })
}

async fn models(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({"object": "list", "data": [model_json(&state)]}))
}

async fn model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if id != state.model_id {
        return Err(ApiError::not_found(
            format!(
                "model '{id}' does not exist (this server has '{}')",
                state.model_id
            ),
            "model_not_found",
        ));
    }
    Ok(Json(model_json(&state)))
}

#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
}

fn yes() -> bool {
    true
}

async fn tokenize(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let r: TokenizeRequest = parse_json(&body(b)?)?;
    let ids = state.tok.encode(&r.content, r.add_special, r.parse_special);
    Ok(Json(json!({"tokens": ids})))
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

async fn detokenize(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let r: DetokenizeRequest = parse_json(&body(b)?)?;
    let text = state
        .tok
        .decode(&r.tokens)
        .map_err(|e| ApiError::bad_request(e.to_string(), Some("tokens")))?;
    Ok(Json(json!({"content": text})))
}
