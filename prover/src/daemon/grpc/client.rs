//! A client of the daemon's gRPC service that asks as Curio asks: one
//! unary `Prove` over the unix socket or the TCP port of the daemon's
//! `[grpc]` config, with Curio's transport (plaintext h2c, the authority
//! `localhost` on a socket). What `prover client c2 --grpc` and so
//! fleetctl's smoke step use to check the path Curio's proofs take.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

use crate::daemon::config::Grpc;
use crate::daemon::grpc::pb::await_proof_response::Status as ProofStatus;
use crate::daemon::grpc::pb::proving_engine_client::ProvingEngineClient;
use crate::daemon::grpc::pb::{AwaitProofResponse, ProveRequest, SubmitProofRequest};

/// Where the service listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
}

impl Target {
    /// The daemon's own address from its `[grpc]` config: the unix socket
    /// where there is one (Curio's usual setting), else the TCP port.
    pub fn of(config: &Grpc) -> Option<Target> {
        match (&config.socket, config.listen) {
            (Some(path), _) => Some(Target::Unix(path.clone())),
            (None, Some(addr)) => Some(Target::Tcp(addr)),
            (None, None) => None,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix://{}", p.display()),
            Target::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// Why a `Prove` gave no proof.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting to the gRPC service at {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The call was refused or broke off: the status says whose fault.
    #[error("Prove: {} ({:?})", crate::filecoin::bounded_reason(.0.message()), .0.code())]
    Status(tonic::Status),
    /// The service answered, without a proof.
    #[error("Prove: job {job_id} ended {status}: {message}")]
    NoProof {
        job_id: String,
        status: &'static str,
        message: String,
    },
}

/// Sends `submit` as one `Prove` call to `target` with `deadline` (Curio:
/// 30 minutes), messages up to `max_message` bytes either way; the answer
/// with its proof, or why there is none.
pub async fn prove(
    target: &Target,
    submit: SubmitProofRequest,
    deadline: Duration,
    max_message: usize,
) -> Result<AwaitProofResponse, ClientError> {
    let connect_err = |source| ClientError::Connect {
        target: target.to_string(),
        source,
    };
    let channel = match target {
        Target::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))
            .map_err(connect_err)?
            .connect()
            .await
            .map_err(connect_err)?,
        Target::Unix(path) => {
            // The URI only names the authority Go's gRPC sends on a socket;
            // the connector ignores it and dials the path.
            let path = path.clone();
            Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(stream))
                    }
                }))
                .await
                .map_err(connect_err)?
        }
    };
    let mut client = ProvingEngineClient::new(channel)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    let mut request = tonic::Request::new(ProveRequest {
        submit: Some(submit),
    });
    request.set_timeout(deadline);
    let answer = client
        .prove(request)
        .await
        .map_err(ClientError::Status)?
        .into_inner()
        .result
        .unwrap_or_default();
    match answer.status() {
        ProofStatus::Completed if !answer.proof.is_empty() => Ok(answer),
        status => Err(ClientError::NoProof {
            job_id: answer.job_id.clone(),
            status: status.as_str_name(),
            message: crate::filecoin::bounded_reason(&answer.error_message),
        }),
    }
}
