//! The HTTP API (axum): routes, bearer authentication, and the mapping of
//! every refusal to a status code with an [`ErrorBody`]. Bodies are the
//! types of [`fleet_wire::api`].

use crate::budget::MemoryBudget;
use crate::daemon::config::{Filecoin, HttpLimits};
use crate::daemon::engine::{Engine, SubmitError};
use crate::daemon::metrics::{Metrics, Sample};
use crate::pool::PinnedPool;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fleet_wire::api::{
    self as wire, BudgetStats, DaemonState, ErrorBody, FilecoinSubmitRequest, Health, PoolStats,
    Ready, Status, SubmitRequest, SubmitResponse,
};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longest a `/wait` request may hold the connection.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// Where the daemon is in its life, and why it is not ready.
#[derive(Debug)]
pub struct Readiness {
    inner: Mutex<(DaemonState, Option<String>)>,
}

impl Readiness {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new((DaemonState::Starting, Some("starting".into()))),
        }
    }

    /// Still starting; `reason` says which step runs.
    pub fn starting(&self, reason: impl Into<String>) {
        *self.inner.lock() = (
            DaemonState::Starting,
            Some(format!("starting: {}", reason.into())),
        );
    }

    pub fn ready(&self) {
        *self.inner.lock() = (DaemonState::Ready, None);
    }

    pub fn draining(&self) {
        *self.inner.lock() = (DaemonState::Draining, Some("draining".into()));
    }

    pub fn get(&self) -> (DaemonState, Option<String>) {
        self.inner.lock().clone()
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything the handlers share. Parts built during start-up are set once
/// they exist; until then the routes that need them answer 503.
pub struct AppState {
    pub engine: OnceLock<Arc<Engine>>,
    pub budget: OnceLock<Arc<MemoryBudget>>,
    pub pool: OnceLock<PinnedPool>,
    pub readiness: Readiness,
    pub metrics: Arc<Metrics>,
    pub token: Option<String>,
    /// The configured address; [`AppState::bound`] once the port is bound.
    pub listen: SocketAddr,
    /// What the listener bound (the kernel's port for `listen` on port 0):
    /// set when serving starts, which a handover does after start-up.
    pub bound: OnceLock<SocketAddr>,
    pub started: Instant,
    pub http: HttpLimits,
    pub filecoin: Filecoin,
    /// Permits for Filecoin job bodies in memory at once.
    filecoin_bodies: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(metrics: Arc<Metrics>, token: Option<String>, listen: SocketAddr) -> Self {
        Self {
            engine: OnceLock::new(),
            budget: OnceLock::new(),
            pool: OnceLock::new(),
            readiness: Readiness::new(),
            metrics,
            token,
            listen,
            bound: OnceLock::new(),
            started: Instant::now(),
            http: HttpLimits::default(),
            filecoin: Filecoin::default(),
            filecoin_bodies: Arc::new(tokio::sync::Semaphore::new(
                Filecoin::default().max_concurrent_bodies as usize,
            )),
        }
    }

    /// The size, time and concurrency limits of Filecoin job bodies.
    pub fn with_filecoin_limits(mut self, filecoin: Filecoin) -> Self {
        self.filecoin_bodies = Arc::new(tokio::sync::Semaphore::new(
            filecoin.max_concurrent_bodies as usize,
        ));
        self.filecoin = filecoin;
        self
    }

    /// The URI, header and body limits the router enforces.
    pub fn with_http_limits(mut self, http: HttpLimits) -> Self {
        self.http = http;
        self
    }

    fn budget_stats(&self) -> BudgetStats {
        self.budget
            .get()
            .map(|b| {
                let s = b.stats();
                BudgetStats {
                    total_bytes: s.total,
                    reserved_bytes: s.reserved,
                    available_bytes: s.available,
                    waiters: s.waiters as u64,
                }
            })
            .unwrap_or_default()
    }

    fn pool_stats(&self) -> PoolStats {
        self.pool
            .get()
            .map(|p| {
                let s = p.stats();
                PoolStats {
                    allocator: s.allocator,
                    pinned: s.page_locked,
                    held_bytes: s.bytes_pinned,
                    in_use_bytes: s.bytes_in_use,
                    max_bytes: s.max_bytes,
                }
            })
            .unwrap_or_default()
    }

    pub fn status(&self) -> Status {
        let engine = self.engine.get();
        let (completed, failed, last) = engine.map(|e| e.counters()).unwrap_or((0, 0, None));
        Status {
            api_version: wire::API_VERSION,
            version: crate::VERSION.to_string(),
            build: crate::BUILD_HASH.to_string(),
            pid: std::process::id(),
            state: self.readiness.get().0,
            listen: self.bound.get().unwrap_or(&self.listen).to_string(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            queue: engine.map(|e| e.queue_stats()).unwrap_or_default(),
            budget: self.budget_stats(),
            pool: self.pool_stats(),
            backend: engine
                .map(|e| e.backend_name())
                .unwrap_or("none")
                .to_string(),
            devices: engine.map(|e| e.devices()).unwrap_or_default(),
            proofs_completed: completed,
            proofs_failed: failed,
            last_proof_ms: last,
        }
    }
}

/// An error answer: status plus [`ErrorBody`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, error: &str, detail: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                error: error.to_string(),
                detail: detail.into(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        match self.status {
            StatusCode::UNAUTHORIZED => {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            _ => {}
        }
        resp
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let (status, code) = match &e {
            SubmitError::UnknownCircuit(_) => (StatusCode::BAD_REQUEST, "unknown_circuit"),
            SubmitError::SizeOutOfRange(_) => (StatusCode::BAD_REQUEST, "size_out_of_range"),
            SubmitError::BadPartitions { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            SubmitError::TooLarge { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "too_large_for_budget")
            }
            SubmitError::QueueFull { .. } => (StatusCode::TOO_MANY_REQUESTS, "queue_full"),
            SubmitError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
            SubmitError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            SubmitError::ParamsMissing(_) => (StatusCode::UNPROCESSABLE_ENTITY, "params_missing"),
            SubmitError::NoDevice => (StatusCode::SERVICE_UNAVAILABLE, "no_device"),
            SubmitError::Filecoin(f) => filecoin_status(f),
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// A Filecoin job's refusal: a parameter file missing or unusable is the
/// host's to fix (422, as for bundled circuits); anything else is the input.
fn filecoin_status(e: &crate::filecoin::FilecoinError) -> (StatusCode, &'static str) {
    if e.is_parameters() {
        (StatusCode::UNPROCESSABLE_ENTITY, "params_missing")
    } else {
        (StatusCode::BAD_REQUEST, "bad_filecoin_input")
    }
}

type Shared = Arc<AppState>;

/// The router over `state`.
pub fn router(state: Shared) -> Router {
    let limits = &state.http;
    Router::new()
        .route(wire::HEALTHZ_PATH, get(healthz))
        .route(wire::JOBS_PATH, axum::routing::post(submit))
        .route(
            wire::FILECOIN_JOBS_PATH,
            axum::routing::post(submit_filecoin),
        )
        .route("/v1/jobs/{id}", get(job).delete(cancel))
        .route("/v1/jobs/{id}/wait", get(wait))
        .route(wire::READYZ_PATH, get(readyz))
        .route(wire::STATUS_PATH, get(status))
        .route(wire::METRICS_PATH, get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(
            usize::try_from(limits.max_body_bytes.0.max(state.filecoin.max_body_bytes.0))
                .unwrap_or(usize::MAX),
        ))
        .layer(middleware::from_fn_with_state(state.clone(), whole_body))
        // Outside `whole_body`: the token is judged from the head alone, so a
        // client without one never holds a body slot or makes the daemon
        // buffer a byte of what it sends.
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), head_limits))
        .layer(middleware::map_response(json_errors))
        .with_state(state)
}

/// URI and header limits, answered as JSON before anything else runs
/// (hyper's own, larger, limits answer with an empty body).
async fn head_limits(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let uri_bytes = req.uri().path_and_query().map_or(0, |p| p.as_str().len()) as u64;
    if uri_bytes > state.http.max_uri_bytes.0 {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!(
                "the request target has {uri_bytes} bytes; at most {} (http.max_uri_bytes)",
                state.http.max_uri_bytes.0
            ),
        )
        .into_response();
    }
    let header_bytes: u64 = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
        .sum();
    if header_bytes > state.http.max_header_bytes.0 {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request headers have {header_bytes} bytes; at most {} (http.max_header_bytes)",
                state.http.max_header_bytes.0
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// Reads the whole request body before any handler runs, under one deadline
/// (`http.body_read_timeout`, from the end of the head, however the body
/// trickles in) and the size limit. A declared `Content-Length` over the
/// limit is refused before a byte of the body is read.
async fn whole_body(State(state): State<Shared>, req: Request, next: Next) -> Response {
    // Filecoin job bodies are large (a C1 output): their own limits, and a
    // permit each, so only a few are held in memory at once.
    let filecoin = req.uri().path() == wire::FILECOIN_JOBS_PATH;
    let (limit, deadline, limit_key, timeout_key) = match filecoin {
        true => (
            state.filecoin.max_body_bytes.0,
            state.filecoin.body_read_timeout.0,
            "filecoin.max_body_bytes",
            "filecoin.body_read_timeout",
        ),
        false => (
            state.http.max_body_bytes.0,
            state.http.body_read_timeout.0,
            "http.max_body_bytes",
            "http.body_read_timeout",
        ),
    };
    let too_large = |what: String| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("{what}; at most {limit} bytes ({limit_key})"),
        )
        .into_response()
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = declared.filter(|&len| len > limit) {
        return too_large(format!("the body declares {len} bytes"));
    }
    // Filecoin bodies beyond the permits wait their turn (Curio and scripts
    // submit many at once) rather than being turned away, for as long as a
    // body may take to arrive; the deadline below starts with the permit.
    let _permit = match filecoin {
        true => match tokio::time::timeout(deadline, state.filecoin_bodies.clone().acquire_owned())
            .await
        {
            Ok(Ok(p)) => Some(p),
            _ => {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    format!(
                        "{} Filecoin job bodies were being read and checked for all of {} ({timeout_key}); retry later",
                        state.filecoin.max_concurrent_bodies,
                        humantime::format_duration(deadline)
                    ),
                )
                .into_response();
            }
        },
        false => None,
    };
    let (parts, body) = req.into_parts();
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    let bytes = match tokio::time::timeout(deadline, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large("the body is longer".into());
        }
        Ok(Err(e)) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("reading the request body: {e}"),
            )
            .into_response();
        }
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the request body did not arrive within {} ({timeout_key})",
                    humantime::format_duration(deadline)
                ),
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// The stable `error` code of a status the handlers do not produce themselves.
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

/// Turns every error answer that is not already an [`ErrorBody`] (axum's
/// plain-text extractor rejections: bad path or query, body too large or
/// unreadable) into one, keeping its status and its text as the detail.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let detail = match text.is_empty() {
        true => status.canonical_reason().unwrap_or("error").to_string(),
        false => text,
    };
    let mut out = ApiError::new(status, code_for(status), detail).into_response();
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

/// Compares without an early exit, so response time does not leak the token.
fn token_matches(given: &[u8], want: &[u8]) -> bool {
    given.len() == want.len()
        && given
            .iter()
            .zip(want)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Every route but `/healthz` (the liveness probe, which says nothing a
/// stranger could use) needs the token when the config sets one; unknown
/// routes too, so a stranger cannot map the API.
async fn auth(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let Some(want) = &state.token else {
        return next.run(req).await;
    };
    if req.uri().path() == wire::HEALTHZ_PATH {
        return next.run(req).await;
    }
    let unauthorized =
        |why: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why).into_response();
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return unauthorized(
            "missing `Authorization: Bearer <token>` header (the daemon's config sets api_token)",
        );
    };
    // The scheme is case-insensitive (RFC 9110, section 11.1); the token is not.
    let given = value.to_str().ok().and_then(|v| {
        let (scheme, token) = v.trim_start().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(token)
    });
    match given {
        Some(t) if token_matches(t.trim().as_bytes(), want.as_bytes()) => next.run(req).await,
        Some(_) => unauthorized("wrong bearer token"),
        None => unauthorized(
            "malformed `Authorization` header: expected `Bearer <token>` in visible ASCII",
        ),
    }
}

fn engine(state: &AppState) -> Result<&Arc<Engine>, ApiError> {
    state.engine.get().ok_or_else(|| {
        let reason = state.readiness.get().1.unwrap_or_else(|| "starting".into());
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", reason)
    })
}

async fn submit(State(state): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: SubmitRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid job JSON: {e}"),
        )
    })?;
    if state.readiness.get().0 == DaemonState::Draining {
        return Err(SubmitError::Draining.into());
    }
    let engine = engine(&state)?.clone();
    // Sizing a circuit counts its constraints: keep it off the async threads.
    let id = tokio::task::spawn_blocking(move || engine.submit(req))
        .await
        .map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })??;
    Ok((StatusCode::ACCEPTED, Json(SubmitResponse { job_id: id })).into_response())
}

async fn submit_filecoin(State(state): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: FilecoinSubmitRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            // serde repeats a bad enum variant whole: bounded, one line.
            format!(
                "invalid Filecoin job JSON: {}",
                crate::filecoin::bounded_reason(&e.to_string())
            ),
        )
    })?;
    drop(body);
    if state.readiness.get().0 == DaemonState::Draining {
        return Err(SubmitError::Draining.into());
    }
    let engine = engine(&state)?.clone();
    // Checking a C1 output verifies its vanilla proofs, and the first job of
    // a circuit reads its parameter file: seconds of CPU and disk.
    let id = tokio::task::spawn_blocking(move || engine.submit_filecoin(&req))
        .await
        .map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })??;
    Ok((StatusCode::ACCEPTED, Json(SubmitResponse { job_id: id })).into_response())
}

fn not_found_job(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no job {} (finished jobs are forgotten after a while)",
            crate::daemon::engine::jobs::job_ref(id)
        ),
    )
}

async fn job(State(state): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let status = engine(&state)?.job(&id).ok_or_else(|| not_found_job(&id))?;
    Ok(Json(status).into_response())
}

async fn wait(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let bad = |detail: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", detail);
    if let Some((k, _)) = q.iter().find(|(k, _)| k != "timeout") {
        return Err(bad(format!(
            "unknown query parameter {k:?}: the only one is `timeout`"
        )));
    }
    if q.len() > 1 {
        return Err(bad("`timeout` given more than once".into()));
    }
    let timeout = match q.first().map(|(_, v)| v) {
        None => Duration::from_secs(30),
        Some(t) => wire::parse_timeout(t).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("invalid timeout {t:?}: expected e.g. 30s, 2m, 1500ms"),
            )
        })?,
    }
    .min(MAX_WAIT);
    let engine = engine(&state)?.clone();
    let status = engine
        .wait(&id, timeout)
        .await
        .ok_or_else(|| not_found_job(&id))?;
    Ok(Json(status).into_response())
}

async fn cancel(State(state): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let status = engine(&state)?
        .cancel(&id)
        .ok_or_else(|| not_found_job(&id))?;
    Ok(Json(status).into_response())
}

async fn healthz() -> Json<Health> {
    Json(Health {
        alive: true,
        version: crate::VERSION.to_string(),
        build: crate::BUILD_HASH.to_string(),
    })
}

async fn readyz(State(state): State<Shared>) -> Response {
    let (s, reason) = state.readiness.get();
    let ready = s == DaemonState::Ready;
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(Ready { ready, reason })).into_response()
}

async fn status(State(state): State<Shared>) -> Json<Status> {
    Json(state.status())
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics_text(),
    )
        .into_response()
}

impl AppState {
    /// The Prometheus/OpenMetrics text of `/metrics` (and gRPC `GetMetrics`).
    pub fn metrics_text(&self) -> String {
        let st = self.status();
        self.metrics.render(&Sample {
            queue_depth: st.queue.depth,
            partitions_in_flight: st.queue.partitions_in_flight,
            pool_held_bytes: st.pool.held_bytes,
            pool_in_use_bytes: st.pool.in_use_bytes,
            budget_total_bytes: st.budget.total_bytes,
            budget_reserved_bytes: st.budget.reserved_bytes,
            budget_waiters: st.budget.waiters,
            ready: st.state == DaemonState::Ready,
            uptime_s: st.uptime_s,
            gpu_utilization_pct: crate::health::gpu::utilization(),
        })
    }
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abd", b"abc"));
        assert!(!token_matches(b"ab", b"abc"));
    }

    #[test]
    fn submit_errors_map_to_documented_statuses() {
        let e: ApiError = SubmitError::QueueFull { depth: 2, max: 2 }.into();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.body.error, "queue_full");
        let e: ApiError = SubmitError::Draining.into();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        let r = e.into_response();
        assert!(r.headers().contains_key(header::RETRY_AFTER));
    }
}
