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
//!
//! Shutdown answers every client whose connection was made before it: connections still in
//! the listen backlog are accepted (closing the listener would reset them), and a connection
//! that has not begun a request yet gets [`FIRST_REQUEST_GRACE`] to begin one, which is then
//! answered (hyper's graceful shutdown alone closes such a connection unread, and its client
//! sees a request dropped). Connections made after it are refused.

use crate::AppState;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

/// How long a connection accepted before the shutdown may take to begin its first request
/// after it (one that never does closes then, so idle connections hold the exit this long).
pub const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Serves `state`'s app on `listener` until `shutdown` resolves; then stops accepting, lets
/// every connection finish the requests it has (streams included) and returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let permits = match state.max_connections {
        0 => Semaphore::MAX_PERMITS,
        n => n.min(Semaphore::MAX_PERMITS),
    };
    let connections = Arc::new(Semaphore::new(permits));
    // dropping `stop_tx` asks every connection to finish; each holds a `done_rx` until it has
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let conns = Connections {
        header_timeout: (!state.request_timeout.is_zero()).then_some(state.request_timeout),
        app: crate::app(state),
        stop: stop_rx,
        done: done_rx,
    };
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
        conns.spawn(stream, addr, permit);
    }
    match listener.into_std() {
        Ok(backlog) => take_backlog(&backlog, &connections, &conns),
        Err(e) => tracing::warn!("listen backlog not taken: {e}"),
    }
    drop(stop_tx);
    drop(conns);
    done_tx.closed().await;
    Ok(())
}

/// Accepts the connections the kernel completed before the shutdown and that still wait in
/// the listen backlog (while connection permits last), so closing the listener does not reset
/// them. Straight `accept` calls until the backlog is empty: tokio's readiness may not have
/// seen them yet.
fn take_backlog(backlog: &std::net::TcpListener, permits: &Arc<Semaphore>, conns: &Connections) {
    while let Ok(permit) = permits.clone().try_acquire_owned() {
        let Ok((stream, addr)) = backlog.accept() else {
            return;
        };
        match TcpStream::from_std(stream) {
            Ok(stream) => conns.spawn(stream, addr, permit),
            Err(e) => tracing::debug!(%addr, "backlog connection dropped: {e}"),
        }
    }
}

/// What each connection's task needs.
struct Connections {
    app: Router,
    header_timeout: Option<Duration>,
    stop: watch::Receiver<()>,
    done: watch::Receiver<()>,
}

impl Connections {
    /// Serves `stream` on its own task until it closes, or until the shutdown and then the
    /// requests it has (and its first one, when it has not begun it yet; see the module).
    fn spawn(&self, stream: TcpStream, addr: SocketAddr, permit: OwnedSemaphorePermit) {
        let _ = stream.set_nodelay(true);
        // a permit once the connection has begun a request
        let began = Arc::new(Notify::new());
        let on_request = began.clone();
        let svc = self
            .app
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                on_request.notify_one();
                req.extensions_mut().insert(ConnectInfo(addr));
                req
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout);
        let mut stop = self.stop.clone();
        let done = self.done.clone();
        tokio::spawn(async move {
            let conn =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    let first = tokio::time::timeout(FIRST_REQUEST_GRACE, began.notified());
                    tokio::select! {
                        r = conn.as_mut() => r,
                        _ = first => {
                            conn.as_mut().graceful_shutdown();
                            conn.as_mut().await
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%addr, "connection ended: {e}");
            }
            drop(permit);
            drop(done);
        });
    }
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
