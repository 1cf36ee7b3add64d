//! The gRPC service Curio calls, `cuzk.v1.ProvingEngine`
//! (`proto/cuzk/v1/proving.proto`), next to the HTTP API: on a unix socket
//! and/or a TCP port (h2c), both optional (`[grpc]` in the config).
//!
//! Data flows: [`listen`] binds the socket and port -> [`service`] answers
//! each RPC from the engine, [`curio`] turning Curio's requests into the
//! daemon's own and [`ids`] attaching retries to their first job, [`srs`]
//! naming parameter sets as Curio does. [`client`] asks the service as
//! Curio does (`prover client c2 --grpc`, fleetctl's smoke step).

pub mod client;
pub mod curio;
pub mod ids;
pub mod listen;
pub mod pb;
pub mod service;
pub mod srs;

use crate::daemon::api::AppState;
use crate::daemon::config::Grpc;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Serves the service on every bound listener until `stop` is notified
/// (RPCs in flight then finish; the daemon notifies only once drained).
/// The returned tasks end when the servers have stopped.
pub fn spawn(
    config: &Grpc,
    state: Arc<AppState>,
    listeners: listen::Listeners,
    stop: Arc<Notify>,
) -> Vec<JoinHandle<()>> {
    let svc = Arc::new(service::Service::new(state));
    let limit = usize::try_from(config.max_message_bytes.0).unwrap_or(usize::MAX);
    let server = || {
        pb::proving_engine_server::ProvingEngineServer::from_arc(svc.clone())
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
    };
    let mut tasks = Vec::new();
    if let Some(tcp) = listeners.tcp {
        let (svc, stop) = (server(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(tcp);
            let r = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async move { stop.notified().await })
                .await;
            if let Err(e) = r {
                tracing::error!("gRPC server (tcp): {e}");
            }
        }));
    }
    if let Some(unix) = listeners.unix {
        let (svc, stop) = (server(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (listener, socket) = unix.into_parts();
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let r = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async move { stop.notified().await })
                .await;
            if let Err(e) = r {
                tracing::error!("gRPC server (unix socket): {e}");
            }
            socket.remove_if_ours();
        }));
    }
    tasks
}
