//! Per-request limits the router enforces: how many generation requests one client may have
//! in flight ([`ClientSlots`]), and how long a client may take to send a request body
//! ([`read_body`]). The connection-level limits (how many connections, how long the headers
//! may take) are in [`crate::serve`].

use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::header;
use axum::response::Response;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_stream::StreamExt;

/// Routes that run the model: these count against a client's in-flight cap.
pub const GENERATION_ROUTES: [&str; 9] = [
    "/v1/chat/completions",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/embeddings",
];

/// In-flight generation requests per client, at most `max` each (0: no cap).
#[derive(Debug)]
pub struct ClientSlots {
    max: usize,
    held: Mutex<HashMap<String, usize>>,
}

impl ClientSlots {
    pub fn new(max: usize) -> Arc<ClientSlots> {
        Arc::new(ClientSlots {
            max,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for `client`, or `None` when it already has `max` requests in flight. The slot
    /// is given back when the returned guard drops.
    pub fn try_acquire(self: &Arc<Self>, client: String) -> Option<Slot> {
        if self.max == 0 {
            return Some(Slot(None));
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(client.clone()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Slot(Some((self.clone(), client))))
    }

    /// Requests `client` has in flight.
    pub fn in_flight(&self, client: &str) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(client).copied().unwrap_or(0)
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// One in-flight request of one client (see [`ClientSlots::try_acquire`]).
#[derive(Debug)]
pub struct Slot(Option<(Arc<ClientSlots>, String)>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((slots, client)) = self.0.take() {
            let mut held = slots.held.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = held.get_mut(&client) {
                *n -= 1;
                if *n == 0 {
                    held.remove(&client);
                }
            }
        }
    }
}

/// Who sent `req`: the API key when the server requires one (`keyed`: the request has passed
/// the key check, and the server has one key, so every holder of it is one client; a key the
/// server does not check could be varied at will to dodge the cap, so it is not used), else
/// the peer's IP address (all connections from a host share it). A request that arrived
/// without a peer address (a test calling the router directly) counts as client `unknown`.
pub fn client_id(req: &Request, keyed: bool) -> String {
    if keyed {
        return "api-key".to_string();
    }
    match req.extensions().get::<ConnectInfo<SocketAddr>>() {
        Some(ConnectInfo(addr)) => format!("ip:{}", addr.ip()),
        None => "unknown".to_string(),
    }
}

/// `resp` with `slot` held until its body has been sent (or the client went away) when it is
/// a stream, so a stream counts as in flight for as long as it runs. Any other answer was
/// complete when the handler returned: the slot is given back now.
pub fn hold_until_sent(resp: Response, slot: Slot) -> Response {
    let is_stream = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !is_stream {
        return resp;
    }
    resp.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &slot;
            chunk
        }))
    })
}

/// Reads the whole body of `req` within `timeout` (zero: no limit) and at most `limit`
/// bytes, and gives the request back with the body in memory: 408 when the client sends it
/// too slowly, 413 when it is too large (announced or sent), 400 when the connection fails.
/// Handlers then never wait on a client, and the generation that follows is not timed.
pub async fn read_body(req: Request, limit: usize, timeout: Duration) -> Result<Request, ApiError> {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large());
    }
    let (parts, body) = req.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad_request(format!("cannot read the request body: {e}"), None)
            })?;
            if buf.len() + chunk.len() > limit {
                return Err(ApiError::too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    let buf = if timeout.is_zero() {
        read.await?
    } else {
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| ApiError::request_timeout(timeout))??
    };
    Ok(Request::from_parts(parts, Body::from(buf)))
}
