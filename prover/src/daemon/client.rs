//! A blocking client of the daemon's API for `prover client …` and
//! `prover health`: it reads the listen address and token from the same
//! config the daemon uses, so fleetctl's steps can run it on the host. A
//! config listening on port 0 is reached at the address the running daemon
//! recorded beside its pid file.

use crate::daemon::config::Config;
use crate::daemon::pidfile;
use fleet_wire::api::{
    ErrorBody, FilecoinSubmitRequest, JobStatus, Ready, Status, SubmitRequest, SubmitResponse,
    FILECOIN_JOBS_PATH, JOBS_PATH, READYZ_PATH, STATUS_PATH,
};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot build an HTTP client: {0}")]
    Build(reqwest::Error),
    #[error(
        "the config listens on port 0 and no running daemon recorded the port it bound: {reason}"
    )]
    NoBoundAddress { reason: String },
    #[error("{url}: {source}")]
    Request { url: String, source: reqwest::Error },
    #[error("{url}: HTTP {status}: {error}: {detail}")]
    Api {
        url: String,
        status: u16,
        error: String,
        detail: String,
    },
    #[error("{url}: unexpected answer (HTTP {status}): {reason}")]
    Body {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("not a job id ({chars} characters): one to {MAX_JOB_ID} letters, digits, `-` or `_` (as `submit` prints them)")]
    JobId { chars: usize },
}

/// The longest job id the client sends (the daemon's are about 20 characters).
pub const MAX_JOB_ID: usize = 128;

/// Whether `id` can be a job id (the command line checks it up front, so a
/// bad one is a usage error).
pub fn check_job_id(id: &str) -> Result<(), ClientError> {
    job_segment(id).map(|_| ())
}

/// The id as one path segment: only the characters the daemon's ids are
/// made of, so that an id can never reach another route (`../healthz`).
fn job_segment(id: &str) -> Result<&str, ClientError> {
    let ok = (1..=MAX_JOB_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(id)
    } else {
        Err(ClientError::JobId {
            chars: id.chars().count(),
        })
    }
}

/// Talks to one daemon.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: Client,
    base: String,
    token: Option<String>,
}

/// The address to connect to for a listen address: a wildcard listen means
/// "this host", reached over loopback.
pub fn connect_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// Where the daemon `config` describes listens: `listen`, or for port 0 the
/// address the running daemon recorded beside its pid file.
pub fn listen_addr(config: &Config) -> Result<SocketAddr, ClientError> {
    if config.listen.port() != 0 {
        return Ok(config.listen);
    }
    pidfile::read_listen(&config.paths.pid_file)
        .map_err(|reason| ClientError::NoBoundAddress { reason })
}

impl ApiClient {
    /// A client for the daemon `config` describes; `timeout` bounds each request.
    pub fn new(config: &Config, timeout: Duration) -> Result<Self, ClientError> {
        Self::for_addr(listen_addr(config)?, config.api_token.clone(), timeout)
    }

    pub fn for_addr(
        listen: SocketAddr,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let http = Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self {
            http,
            base: format!("http://{}", connect_addr(listen)),
            token,
        })
    }

    fn auth(&self, req: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn send(&self, url: &str, req: RequestBuilder) -> Result<Response, ClientError> {
        self.auth(req)
            .send()
            .map_err(|source| ClientError::Request {
                url: url.to_string(),
                source,
            })
    }

    /// Decodes a 2xx body as `T`, anything else as the API's error body.
    fn decode<T: DeserializeOwned>(url: &str, resp: Response) -> Result<T, ClientError> {
        let status = resp.status();
        let text = resp.text().map_err(|source| ClientError::Request {
            url: url.to_string(),
            source,
        })?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|e| ClientError::Body {
                url: url.to_string(),
                status: status.as_u16(),
                reason: e.to_string(),
            });
        }
        Err(match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => ClientError::Api {
                url: url.to_string(),
                status: status.as_u16(),
                error: b.error,
                detail: b.detail,
            },
            Err(_) => ClientError::Body {
                url: url.to_string(),
                status: status.as_u16(),
                reason: text.chars().take(200).collect(),
            },
        })
    }

    pub fn submit(&self, req: &SubmitRequest) -> Result<SubmitResponse, ClientError> {
        let url = format!("{}{JOBS_PATH}", self.base);
        let resp = self.send(&url, self.http.post(&url).json(req))?;
        Self::decode(&url, resp)
    }

    /// Sends a Filecoin job (its body may be tens of MB: a C1 output).
    pub fn submit_filecoin(
        &self,
        req: &FilecoinSubmitRequest,
    ) -> Result<SubmitResponse, ClientError> {
        let url = format!("{}{FILECOIN_JOBS_PATH}", self.base);
        let resp = self.send(&url, self.http.post(&url).json(req))?;
        Self::decode(&url, resp)
    }

    pub fn job(&self, id: &str) -> Result<JobStatus, ClientError> {
        let id = job_segment(id)?;
        let url = format!("{}{JOBS_PATH}/{id}", self.base);
        let resp = self.send(&url, self.http.get(&url))?;
        Self::decode(&url, resp)
    }

    /// Waits up to `timeout` for the job to finish, re-asking the server in
    /// slices so neither side holds a request open too long. Returns the last
    /// status seen (finished or not).
    pub fn wait(&self, id: &str, timeout: Duration) -> Result<JobStatus, ClientError> {
        let id = job_segment(id)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let slice = left.min(Duration::from_secs(20));
            let url = format!(
                "{}{JOBS_PATH}/{id}/wait?timeout={}ms",
                self.base,
                slice.as_millis()
            );
            // The request itself may take the whole slice.
            let req = self.http.get(&url).timeout(slice + Duration::from_secs(10));
            let status: JobStatus = Self::decode(&url, self.send(&url, req)?)?;
            if status.state.is_finished() || left.is_zero() {
                return Ok(status);
            }
        }
    }

    pub fn cancel(&self, id: &str) -> Result<JobStatus, ClientError> {
        let id = job_segment(id)?;
        let url = format!("{}{JOBS_PATH}/{id}", self.base);
        let resp = self.send(&url, self.http.delete(&url))?;
        Self::decode(&url, resp)
    }

    pub fn status(&self) -> Result<Status, ClientError> {
        let url = format!("{}{STATUS_PATH}", self.base);
        let resp = self.send(&url, self.http.get(&url))?;
        Self::decode(&url, resp)
    }

    /// `/readyz`: 200 and 503 both carry a [`Ready`] body.
    pub fn ready(&self) -> Result<Ready, ClientError> {
        let url = format!("{}{READYZ_PATH}", self.base);
        let resp = self.send(&url, self.http.get(&url))?;
        let status = resp.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let text = resp.text().unwrap_or_default();
            return serde_json::from_str(&text).map_err(|e| ClientError::Body {
                url,
                status: status.as_u16(),
                reason: e.to_string(),
            });
        }
        Self::decode(&url, resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_listen_is_reached_over_loopback() {
        assert_eq!(
            connect_addr("0.0.0.0:7878".parse().unwrap()).to_string(),
            "127.0.0.1:7878"
        );
        assert_eq!(
            connect_addr("[::]:1".parse().unwrap()).to_string(),
            "[::1]:1"
        );
        assert_eq!(
            connect_addr("10.0.0.5:9".parse().unwrap()).to_string(),
            "10.0.0.5:9"
        );
    }

    #[test]
    fn nothing_listening_is_a_request_error_naming_the_url() {
        let refusing = fleet_testkit::RefusingAddr::new().unwrap();
        let addr = refusing.addr();
        let c = ApiClient::for_addr(addr, None, Duration::from_secs(2)).unwrap();
        let e = c.status().unwrap_err().to_string();
        assert!(e.contains(&format!("http://{addr}/status")), "{e}");
    }

    #[test]
    fn port_0_is_reached_at_the_address_the_daemon_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.paths.pid_file = dir.path().join("prover.pid");
        config.listen = "127.0.0.1:0".parse().unwrap();
        let e = listen_addr(&config).unwrap_err().to_string();
        assert!(e.contains("port 0") && e.contains("prover.pid.addr"), "{e}");
        let pf = pidfile::PidFile::acquire(&config.paths.pid_file).unwrap();
        let bound = "127.0.0.1:40123".parse().unwrap();
        pf.record_listen(bound).unwrap();
        assert_eq!(listen_addr(&config).unwrap(), bound);
        config.listen = "127.0.0.1:7878".parse().unwrap();
        assert_eq!(
            listen_addr(&config).unwrap(),
            config.listen,
            "a set port wins"
        );
    }
}
