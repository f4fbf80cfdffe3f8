//! Errors: [`ServerError`] for loading and running the model, [`ApiError`] for what an HTTP
//! client sees (OpenAI's `{"error": {...}}` shape, or Anthropic's on `/v1/messages`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Loading or running the model went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Model(#[from] model::ModelError),
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokError),
    #[error(transparent)]
    Template(#[from] template::TemplateError),
    #[error(transparent)]
    Sampler(#[from] sampler::SamplerError),
    #[error(transparent)]
    Cpu(#[from] cpu::CpuError),
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] cuda::CudaError),
    #[error("this build of molla has no CUDA backend (built without the `cuda` feature)")]
    NoCuda,
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] gpu::GpuError),
    #[error("this build of molla has no wgpu backend (build with `--features gpu`)")]
    NoGpu,
    #[error("KV cache belongs to another backend")]
    CacheMismatch,
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("{0}")]
    Config(String),
    /// Constrained generation could not go on (crate::constrain).
    #[error("{0}")]
    Constraint(String),
    #[error("the engine thread has stopped")]
    EngineGone,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Which API's error shape to answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
    /// Ollama's `{"error": "message"}` (`/api/*`).
    Ollama,
}

/// An error answered to an HTTP client.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub flavor: Flavor,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            flavor: Flavor::OpenAi,
        }
    }

    /// 400 about the field `param` (None: the body as a whole).
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = param.map(String::from);
        e
    }

    pub fn unauthorized() -> ApiError {
        let mut e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key",
        );
        e.code = Some("invalid_api_key");
        e
    }

    pub fn not_found(message: impl Into<String>, code: &'static str) -> ApiError {
        let mut e = ApiError::new(StatusCode::NOT_FOUND, "not_found_error", message);
        e.code = Some(code);
        e
    }

    /// 405: the route exists, not with this method.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            message,
        );
        e.code = Some("method_not_allowed");
        e
    }

    pub fn too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request body too large",
        )
    }

    pub fn busy() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded_error",
            "the request queue is full; retry later",
        )
    }

    /// 429: the client already has `max` generation requests in flight.
    pub fn too_many_requests(max: usize) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "requests",
            format!(
                "too many requests in flight from this client (at most {max}); \
                 retry when one has finished"
            ),
        );
        e.code = Some("rate_limit_exceeded");
        e
    }

    /// 408: the client took longer than `timeout` to send its request.
    pub fn request_timeout(timeout: std::time::Duration) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {:.1} s",
                timeout.as_secs_f64()
            ),
        );
        e.code = Some("request_timeout");
        e
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn anthropic(mut self) -> ApiError {
        self.flavor = Flavor::Anthropic;
        self
    }

    pub fn ollama(mut self) -> ApiError {
        self.flavor = Flavor::Ollama;
        self
    }

    /// The JSON body, in this error's flavor.
    pub fn body(&self) -> serde_json::Value {
        match self.flavor {
            Flavor::Ollama => json!({"error": self.message}),
            Flavor::OpenAi => json!({"error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }}),
            Flavor::Anthropic => {
                let kind = match self.status {
                    StatusCode::BAD_REQUEST
                    | StatusCode::METHOD_NOT_ALLOWED
                    | StatusCode::REQUEST_TIMEOUT => "invalid_request_error",
                    StatusCode::UNAUTHORIZED => "authentication_error",
                    StatusCode::NOT_FOUND => "not_found_error",
                    StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
                    StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                    StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
                    _ => "api_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": self.message}})
            }
        }
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> ApiError {
        ApiError::internal(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// Parses a JSON body into `T`; a failure is a 400 naming the field that failed.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let text = inner.to_string();
        // serde names a missing field in its message, not in the path
        let missing = text
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next());
        let param = match (path.as_str(), missing) {
            (".", Some(m)) => Some(m.to_string()),
            (".", None) => None,
            (p, Some(m)) => Some(format!("{p}.{m}")),
            (p, None) => Some(p.to_string()),
        };
        let message = match &param {
            Some(p) => format!("invalid request body: {p}: {inner}"),
            None => format!("invalid request body: {inner}"),
        };
        ApiError::bad_request(message, param.as_deref())
    })
}
