//! Serving the API so that a hostile client cannot hold the daemon: HTTP/1
//! from hyper with a header-read timeout (which also closes idle keep-alive
//! connections), a deadline for the whole request body, caps on open
//! connections in all and per peer address, a small reserve of connections
//! past those caps that still answers the probes, and limits on URI, header
//! and body size answered with the API's JSON errors.
//!
//! axum::serve exposes none of these settings, hence hyper's connection
//! builder here; everything else is hyper's, hyper-util's and tower-http's.

// The limits are configuration: defined with the rest of it, re-exported here
// for the server's callers.
pub use crate::daemon::config::HttpLimits;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Longest a probe-reserve connection may take to send its request head: the
/// reserve must turn over quickly, or a few stalled clients would hold it.
const PROBE_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves `app` on `listener` until `stop` completes, then lets open
/// requests finish (the caller bounds how long).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &HttpLimits,
    stop: impl Future<Output = ()>,
) {
    let slots = Slots::new(limits);
    let graceful = GracefulShutdown::new();
    let mut full = hyper::server::conn::http1::Builder::new();
    full.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0)
        .max_buf_size(limits.read_buffer());
    let mut probe = hyper::server::conn::http1::Builder::new();
    probe
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0.min(PROBE_HEAD_TIMEOUT))
        .max_buf_size(limits.read_buffer())
        .keep_alive(false);
    let probes_only = app.clone().layer(middleware::from_fn(probes_only));
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
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
        let io = TokioIo::new(stream);
        match slots.admit(peer.ip()) {
            Some(slot @ Slot::Full { .. }) => {
                let service = TowerToHyperService::new(app.clone());
                let conn = graceful.watch(full.serve_connection(io, service));
                tokio::spawn(async move {
                    // A closed or timed-out connection is the client's business.
                    let _ = conn.await;
                    drop(slot);
                });
            }
            Some(slot @ Slot::Probe { .. }) => {
                let service = TowerToHyperService::new(probes_only.clone());
                let conn = graceful.watch(probe.serve_connection(io, service));
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(slot);
                });
            }
            None => {
                tracing::debug!(%peer, "connection refused: every slot and the probe reserve are taken");
                drop(io);
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The connection books: how many full-API connections are open in all and
/// per peer address, and how many probe-reserve ones.
#[derive(Clone)]
struct Slots {
    inner: Arc<Mutex<Books>>,
    max_total: u32,
    max_per_peer: u32,
    max_probe: u32,
}

#[derive(Default)]
struct Books {
    total: u32,
    per_peer: HashMap<IpAddr, u32>,
    probe: u32,
}

/// One open connection's place in the books, given back on drop.
enum Slot {
    Full { slots: Slots, peer: IpAddr },
    Probe { slots: Slots },
}

impl Slots {
    fn new(limits: &HttpLimits) -> Self {
        Slots {
            inner: Arc::default(),
            max_total: limits.max_connections,
            max_per_peer: limits.max_connections_per_peer,
            max_probe: limits.probe_connections,
        }
    }

    fn admit(&self, peer: IpAddr) -> Option<Slot> {
        let mut b = self.inner.lock();
        let mine = b.per_peer.get(&peer).copied().unwrap_or(0);
        if b.total < self.max_total && mine < self.max_per_peer {
            b.total += 1;
            *b.per_peer.entry(peer).or_insert(0) += 1;
            return Some(Slot::Full {
                slots: self.clone(),
                peer,
            });
        }
        if b.probe < self.max_probe {
            b.probe += 1;
            return Some(Slot::Probe {
                slots: self.clone(),
            });
        }
        None
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        match self {
            Slot::Full { slots, peer } => {
                let mut b = slots.inner.lock();
                b.total = b.total.saturating_sub(1);
                if let Some(n) = b.per_peer.get_mut(peer) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        b.per_peer.remove(peer);
                    }
                }
            }
            Slot::Probe { slots } => {
                let mut b = slots.inner.lock();
                b.probe = b.probe.saturating_sub(1);
            }
        }
    }
}

/// On a probe-reserve connection, only the liveness and readiness probes are
/// served; anything else is told to come back.
async fn probes_only(req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == fleet_wire::api::HEALTHZ_PATH || path == fleet_wire::api::READYZ_PATH {
        return next.run(req).await;
    }
    crate::daemon::api::ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        "every connection slot is taken (http.max_connections, http.max_connections_per_peer); \
         this connection answers only /healthz and /readyz",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: u32, per_peer: u32, probe: u32) -> HttpLimits {
        HttpLimits {
            max_connections: total,
            max_connections_per_peer: per_peer,
            probe_connections: probe,
            ..HttpLimits::default()
        }
    }

    #[test]
    fn a_peer_past_its_cap_gets_the_probe_reserve_then_nothing_and_slots_come_back() {
        let slots = Slots::new(&limits(3, 2, 1));
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let a1 = slots.admit(a).unwrap();
        let _a2 = slots.admit(a).unwrap();
        assert!(matches!(a1, Slot::Full { .. }));
        let a3 = slots.admit(a).unwrap();
        assert!(
            matches!(a3, Slot::Probe { .. }),
            "a's third is a probe slot"
        );
        assert!(slots.admit(a).is_none(), "reserve used up");
        let b1 = slots.admit(b).unwrap();
        assert!(matches!(b1, Slot::Full { .. }), "b has its own cap");
        assert!(slots.admit(b).is_none(), "total cap and reserve used up");
        drop(a1);
        let a4 = slots.admit(a).unwrap();
        assert!(matches!(a4, Slot::Full { .. }), "a's slot came back");
        assert!(
            slots.admit(b).is_none(),
            "total cap and reserve still used up"
        );
        drop(a3);
        let b2 = slots.admit(b).unwrap();
        assert!(
            matches!(b2, Slot::Probe { .. }),
            "the reserve slot came back"
        );
    }
}
