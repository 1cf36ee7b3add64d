//! Serving the API so that a hostile client cannot hold the daemon: HTTP/1
//! from hyper with a header-read timeout (which also closes idle keep-alive
//! connections), a request-body timeout, a cap on open connections, and
//! limits on URI, header and body size answered with the API's JSON errors.
//!
//! axum::serve exposes none of these settings, hence hyper's connection
//! builder here; everything else is hyper's, hyper-util's and tower-http's.

use crate::daemon::config::{ByteSize, HumanDuration};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// `[http]` in the daemon's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpLimits {
    /// A connection must deliver a complete request head within this after
    /// it opens or after its previous response; otherwise it is closed. This
    /// is also the idle timeout of keep-alive connections.
    pub header_read_timeout: HumanDuration,
    /// A request body must arrive completely within this (answered 408).
    pub body_read_timeout: HumanDuration,
    /// Connections open at once; further ones wait in the listen backlog.
    pub max_connections: u32,
    /// Largest request body (answered 413).
    pub max_body_bytes: ByteSize,
    /// Longest request target, path and query (answered 414).
    pub max_uri_bytes: ByteSize,
    /// Most bytes of request headers, names and values (answered 431).
    pub max_header_bytes: ByteSize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HumanDuration(Duration::from_secs(10)),
            body_read_timeout: HumanDuration(Duration::from_secs(30)),
            max_connections: 1024,
            max_body_bytes: ByteSize(64 << 10),
            max_uri_bytes: ByteSize(8 << 10),
            max_header_bytes: ByteSize(16 << 10),
        }
    }
}

impl HttpLimits {
    /// The key (under `http.`) and reason of the first unusable value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let zero = |d: &HumanDuration| d.0.is_zero();
        if zero(&self.header_read_timeout) {
            return Err(("http.header_read_timeout", "must be more than 0s".into()));
        }
        if zero(&self.body_read_timeout) {
            return Err(("http.body_read_timeout", "must be more than 0s".into()));
        }
        if self.max_connections == 0 {
            return Err(("http.max_connections", "must be at least 1".into()));
        }
        // Our own limits must stay inside hyper's read buffer (see `serve`),
        // so that they, not hyper's parser, answer oversized requests.
        for (key, v) in [
            ("http.max_uri_bytes", self.max_uri_bytes.0),
            ("http.max_header_bytes", self.max_header_bytes.0),
        ] {
            if !(256..=MAX_HEAD_LIMIT).contains(&v) {
                return Err((
                    key,
                    format!("{v} is out of range: 256 ..= {MAX_HEAD_LIMIT}"),
                ));
            }
        }
        if self.max_body_bytes.0 > MAX_BODY_LIMIT {
            return Err((
                "http.max_body_bytes",
                format!(
                    "{} is out of range: at most {MAX_BODY_LIMIT}",
                    self.max_body_bytes.0
                ),
            ));
        }
        Ok(())
    }

    /// hyper's read buffer: room for a head at both our limits, with slack,
    /// so a head just past them still reaches our JSON answers.
    fn read_buffer(&self) -> usize {
        (2 * (self.max_uri_bytes.0 + self.max_header_bytes.0) + (16 << 10)) as usize
    }
}

/// Largest `max_uri_bytes` / `max_header_bytes` accepted.
const MAX_HEAD_LIMIT: u64 = 1 << 20;
/// Largest `max_body_bytes` accepted (job bodies are a few hundred bytes).
const MAX_BODY_LIMIT: u64 = 16 << 20;

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
