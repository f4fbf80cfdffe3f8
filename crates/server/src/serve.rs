//! Serving the app on a TCP listener, with the limits that belong to connections rather than
//! requests: at most [`Config::max_connections`](crate::Config::max_connections) open at
//! once (a semaphore taken before each accept: the next client waits in the listen backlog),
//! and [`Config::request_timeout`](crate::Config::request_timeout) for a request's headers
//! (hyper's `header_read_timeout`: a client that has not sent them all in time, or a
//! keep-alive connection idle that long, is closed). hyper starts that timer only while it
//! waits for a request's head, so a response, however long it streams, is never cut.
//!
//! This is `axum::serve` written out, because axum's gives hyper no timer (so no header
//! timeout) and has no connection limit. Each request carries its peer address as
//! `ConnectInfo<SocketAddr>` for the per-client cap.

use crate::AppState;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// Serves `state`'s app on `listener` until `shutdown` resolves; then stops accepting, lets
/// every connection finish the requests it has (streams included) and returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let header_timeout = (!state.request_timeout.is_zero()).then_some(state.request_timeout);
    let permits = match state.max_connections {
        0 => Semaphore::MAX_PERMITS,
        n => n.min(Semaphore::MAX_PERMITS),
    };
    let connections = Arc::new(Semaphore::new(permits));
    let app = crate::app(state);
    // dropping `stop_tx` asks every connection to finish; each holds a `done_rx` until it has
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = app.clone().map_request(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(addr));
            req
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        let mut stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            let conn =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.as_mut().await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%addr, "connection ended: {e}");
            }
            drop(permit);
            drop(done);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// After a failed accept: go on at once when only that connection failed, else (out of file
/// descriptors, ...) wait a moment so the loop does not spin.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
