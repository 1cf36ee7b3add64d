//! Serving the API so that a hostile client cannot hold the daemon: HTTP/1
//! from hyper with a header-read timeout (which also closes idle keep-alive
//! connections), a request-body timeout, a cap on open connections, and
//! limits on URI, header and body size answered with the API's JSON errors.
//!
//! axum::serve exposes none of these settings, hence hyper's connection
//! builder here; everything else is hyper's, hyper-util's and tower-http's.

// The limits are configuration: defined with the rest of it, re-exported here
// for the server's callers.
pub use crate::daemon::config::HttpLimits;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Serves `app` on `listener` until `stop` completes, then lets open
/// requests finish (the caller bounds how long).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &HttpLimits,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections as usize));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0)
        .max_buf_size(limits.read_buffer());
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off, do not spin.
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A closed or timed-out connection is the client's business.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
