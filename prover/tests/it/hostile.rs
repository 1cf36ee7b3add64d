//! The daemon's API against hostile clients, in-process: generated bad
//! requests against the real router, and stalled connections against the
//! real server (hyper with the configured timeouts) on a loopback port.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use fleet_wire::api::{ErrorBody, JobState, JobStatus, SubmitResponse};
use prover::backend::cpu::CpuBackend;
use prover::budget::MemoryBudget;
use prover::daemon::api::{router, AppState};
use prover::daemon::config::HumanDuration;
use prover::daemon::engine::{Device, Engine, EngineParts};
use prover::daemon::http::{serve, HttpLimits};
use prover::daemon::metrics::Metrics;
use prover::memory_plan::MemoryPlan;
use prover::params::{ParamStore, TestParams};
use prover::pool::{HeapAllocator, PinnedPool, PoolLimits};
use prover::timing::TimingLog;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

const TOKEN: &str = "t0ken";

/// A real engine on the CPU backend with a small budget, its parameter
/// directory in `dir`.
fn state(dir: &std::path::Path, test_params: TestParams, http: HttpLimits) -> Arc<AppState> {
    let budget = MemoryBudget::new(256 << 20);
    let pool = PinnedPool::new(
        Arc::new(HeapAllocator),
        budget.clone(),
        PoolLimits {
            max_bytes: 128 << 20,
            idle_shrink_after: Duration::from_secs(300),
            checkout_timeout: Duration::from_secs(60),
            ..PoolLimits::default()
        },
    );
    let params = ParamStore::open(dir.join("params"))
        .expect("params")
        .with_test_params(test_params)
        .with_budget(budget.clone());
    let metrics = Arc::new(Metrics::new("test", "test"));
    let timing =
        Arc::new(TimingLog::open(dir.join("timing.jsonl"), 1 << 20, 1).expect("timing log"));
    let engine = Engine::start(EngineParts {
        pool: pool.clone(),
        budget: budget.clone(),
        memory: MemoryPlan::new(256 << 20, Some(128 << 20)).expect("plan"),
        params: Arc::new(params),
        devices: vec![Device::new(
            Arc::new(CpuBackend::with_threads(1).expect("cpu")),
            1,
            None,
        )],
        unavailable: Vec::new(),
        timing,
        metrics: metrics.clone(),
        filecoin: prover::daemon::engine::filecoin::FilecoinKeys::new(std::env::temp_dir(), false),
        compiled: prover::daemon::engine::compiled::CompiledSet::new(true, 1),
        concurrency: 1,
        lookahead: 1,
        max_jobs: 8,
        host: "test".into(),
        build: "test".into(),
    })
    .expect("engine");
    let state = AppState::new(
        metrics,
        Some(TOKEN.into()),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .with_http_limits(http);
    let _ = state.engine.set(Arc::new(engine));
    let _ = state.budget.set(budget);
    let _ = state.pool.set(pool);
    state.readiness.ready();
    Arc::new(state)
}

fn pick<'a, T: ?Sized>(rng: &mut ChaCha8Rng, items: &[&'a T]) -> &'a T {
    items[rng.gen_range(0..items.len())]
}

/// A JSON value of some odd kind for a field.
fn odd_value(rng: &mut ChaCha8Rng) -> String {
    let n: u64 = rng.gen();
    pick(
        rng,
        &[
            "0",
            "-1",
            "1e400",
            "NaN",
            "null",
            "true",
            "\"\"",
            "[]",
            "{}",
            "\"1024\"",
            "18446744073709551616",
            "18446744073709551615",
            "4294967296",
            "134217729",
            "1.5",
            "\"chain\\n\"",
            "\"Chain\"",
            "\"sha256 \"",
            "\"\\u0000\"",
        ],
    )
    .replace("RAND", &n.to_string())
}

/// A submission body that must be refused: each one breaks at least one rule.
fn bad_submit_body(rng: &mut ChaCha8Rng) -> Vec<u8> {
    match rng.gen_range(0..8) {
        0 => {
            let len = rng.gen_range(0..64);
            (0..len).map(|_| rng.gen()).collect()
        }
        1 => format!(
            "{{\"circuit\": {}, \"size\": 1024}}",
            pick(
                rng,
                &[
                    "\"chain\\n\"",
                    "\"Chain\"",
                    "\" chain\"",
                    "\"poseidon\"",
                    "1",
                    "null"
                ]
            )
        )
        .into_bytes(),
        2 => format!("{{\"circuit\": \"chain\", \"size\": {}}}", odd_value(rng)).into_bytes(),
        3 => format!(
            "{{\"circuit\": \"chain\", \"size\": 1024, \"partitions\": {}}}",
            pick(rng, &["0", "1025", "-1", "4294967296", "\"2\"", "1e3"])
        )
        .into_bytes(),
        4 => format!(
            "{{\"circuit\": \"chain\", \"size\": 1024, \"{}\": 1}}",
            pick(rng, &["sizee", "extra", "", "circuit\\n"])
        )
        .into_bytes(),
        // Sizes past the budget: refused before any counting.
        5 => format!(
            "{{\"circuit\": \"{}\", \"size\": {}}}",
            pick(rng, &["chain", "sha256"]),
            rng.gen_range((1u64 << 22)..=(1 << 27))
        )
        .into_bytes(),
        // In range and within the budget, but no parameters and none may be generated.
        6 => format!(
            "{{\"circuit\": \"chain\", \"size\": {}, \"seed\": {}}}",
            rng.gen_range(16u64..4096),
            rng.gen::<u64>()
        )
        .into_bytes(),
        _ => {
            let cut = rng.gen_range(1..30);
            b"{\"circuit\": \"chain\", \"size\": 1024}"[..cut].to_vec()
        }
    }
}

fn odd_timeout(rng: &mut ChaCha8Rng) -> String {
    pick(
        rng,
        &[
            "99999999999999999999999s",
            "1e400",
            "NaN",
            "-1s",
            "inf",
            "1.5.5",
            "%00",
            "30parsecs",
            "18446744073709551616ms",
            "9999999999h",
            "",
            "%FF%FE",
            "0x10",
        ],
    )
    .to_string()
}

/// A request that must get a 4xx with an [`ErrorBody`].
fn bad_request(rng: &mut ChaCha8Rng, limits: &HttpLimits) -> Request<Body> {
    let auth = rng.gen_range(0..10) != 0;
    let id: String = (0..rng.gen_range(1..40))
        .map(|_| pick(rng, &["a", "Z", "0", "-", "%20", "%0A", "..", "%2F", "~"]))
        .collect();
    let (method, uri, body): (Method, String, Vec<u8>) = match rng.gen_range(0..10) {
        0..=2 => (Method::POST, "/v1/jobs".into(), bad_submit_body(rng)),
        3 => (
            Method::GET,
            format!("/v1/jobs/{id}/wait?timeout={}", odd_timeout(rng)),
            vec![],
        ),
        4 => (
            pick(rng, &[&Method::GET, &Method::DELETE]).clone(),
            format!("/v1/jobs/{id}"),
            vec![],
        ),
        5 => (
            pick(
                rng,
                &[&Method::PUT, &Method::PATCH, &Method::DELETE, &Method::POST],
            )
            .clone(),
            pick(
                rng,
                &[
                    "/healthz",
                    "/status",
                    "/metrics",
                    "/readyz",
                    "/v1/jobs/x/wait",
                ],
            )
            .into(),
            vec![],
        ),
        6 => (
            Method::GET,
            format!(
                "/{}",
                pick(
                    rng,
                    &["v2/jobs", "v1", "v1/jobs/a/b/c", "%00", "admin", "v1/jobs/"]
                )
            ),
            vec![],
        ),
        7 => (
            Method::POST,
            "/v1/jobs".into(),
            vec![b' '; limits.max_body_bytes.0 as usize + rng.gen_range(1..4096)],
        ),
        8 => (
            Method::GET,
            format!("/status?{}", "a".repeat(limits.max_uri_bytes.0 as usize)),
            vec![],
        ),
        _ => (Method::GET, "/status".into(), vec![]),
    };
    let mut req = Request::builder().method(method).uri(uri);
    if auth {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    } else if rng.gen() {
        req = req.header("authorization", "Bearer wrong");
    }
    // The last kind is only bad for its headers.
    let oversized_headers = body.is_empty() && rng.gen_range(0..10) == 0;
    if oversized_headers || (auth && rng.gen_range(0..10) == 0) {
        req = req.header("x-filler", "f".repeat(limits.max_header_bytes.0 as usize));
    } else if !auth {
        // Fine as it is: refused for its missing or wrong token.
    } else if matches!(rng.gen_range(0..10), 0) {
        req = req.header("content-type", "text/plain");
    }
    let req = req.body(Body::from(body)).expect("request");
    let path = req.uri().path().to_string();
    let harmless = auth
        && req.method() == Method::GET
        && ["/status", "/healthz", "/metrics", "/readyz"].contains(&path.as_str())
        && req.headers().get("x-filler").is_none()
        && req.uri().query().is_none_or(|q| q.len() < 100);
    if harmless {
        // Make it bad: a missing token.
        let (mut parts, body) = req.into_parts();
        parts.headers.remove("authorization");
        return Request::from_parts(parts, body);
    }
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_requests_to_every_route_get_4xx_json_errors_and_never_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = HttpLimits::default();
    let app = router(state(dir.path(), TestParams::Refuse, limits.clone()));
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let started = Instant::now();
    let mut by_status = std::collections::BTreeMap::<u16, u32>::new();
    for i in 0..3000 {
        let req = bad_request(&mut rng, &limits);
        let what = format!("#{i} {} {}", req.method(), req.uri());
        let resp = tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer within 5s"))
            .expect("infallible");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        // /healthz needs no token: a request to it without one is fine.
        if status == StatusCode::OK && what.contains(" /healthz") {
            continue;
        }
        assert!(status.is_client_error(), "{what}: {status} {body:?}");
        let err: ErrorBody = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{what}: {status} body is not an ErrorBody ({e}): {body:?}")
        });
        assert!(
            !err.error.is_empty() && !err.detail.is_empty(),
            "{what}: {err:?}"
        );
        *by_status.entry(status.as_u16()).or_default() += 1;
    }
    // Every refusal the API documents for bad input was exercised.
    for code in [400, 401, 404, 405, 413, 414, 422, 431] {
        assert!(by_status.contains_key(&code), "no {code} in {by_status:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_submissions_are_refused_before_counting_constraints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = router(state(
        dir.path(),
        TestParams::Generate { seed: 0 },
        HttpLimits::default(),
    ));
    let started = Instant::now();
    // Counting sha256 at 2^27 takes tens of seconds of CPU; the bound needs none.
    let req = Request::post("/v1/jobs")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(r#"{"circuit": "sha256", "size": 134217728}"#))
        .expect("request");
    let resp = app.oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    let err: ErrorBody = serde_json::from_slice(&body).expect("error body");
    assert_eq!(err.error, "too_large_for_budget", "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive_and_a_malformed_header_or_wait_query_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = router(state(dir.path(), TestParams::Refuse, HttpLimits::default()));
    let ask = |uri: &str, auth: Option<axum::http::HeaderValue>| {
        let mut req = Request::get(uri);
        if let Some(v) = auth {
            req = req.header("authorization", v);
        }
        let req = req.body(Body::empty()).expect("request");
        let app = app.clone();
        async move {
            let resp = app.oneshot(req).await.expect("infallible");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("body");
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let header = |v: &[u8]| Some(axum::http::HeaderValue::from_bytes(v).expect("header"));
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let (status, body) = ask("/status", header(format!("{scheme} {TOKEN}").as_bytes())).await;
        assert_eq!(status, StatusCode::OK, "{scheme}: {body}");
    }
    let (status, body) = ask("/status", header(b"Bearer \xff\xfe")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("malformed `Authorization` header"), "{body}");
    let (status, body) = ask("/status", header(b"Basic dXNlcjpwdw==")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("malformed"), "{body}");
    let (status, body) = ask("/status", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("missing"), "{body}");

    let auth = || header(format!("Bearer {TOKEN}").as_bytes());
    let (status, body) = ask("/v1/jobs/j1/wait?timeout=1s&timeout=2s", auth()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("more than once"), "{body}");
    let (status, body) = ask("/v1/jobs/j1/wait?timout=1s", auth()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("unknown query parameter \\\"timout\\\""),
        "{body}"
    );
}

/// A Filecoin job whose fields are kilobytes of junk is refused with a
/// message of bounded length, whichever field it is (an unknown kind, a
/// randomness, a prover id, a proof type): an input is never echoed whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filecoin_refusals_do_not_echo_a_kilobytes_long_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = router(state(dir.path(), TestParams::Refuse, HttpLimits::default()));
    let blob = "z".repeat(49_000);
    let bodies = [
        serde_json::json!({"kind": blob, "prover_id": "00".repeat(32)}),
        serde_json::json!({"kind": "winning-post", "prover_id": "00".repeat(32),
            "vanilla_proofs": [], "randomness": blob, "sector_size": 2048}),
        serde_json::json!({"kind": "porep-c2", "prover_id": blob, "c1": {}}),
        serde_json::json!({"kind": "porep-c2", "prover_id": "00".repeat(32), "c1": {},
            "registered_proof": blob, "sector_id": 1}),
    ];
    for body in bodies {
        let req = Request::post("/v1/filecoin/jobs")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("request");
        let resp = app.clone().oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        assert!(
            bytes.len() < 1_000,
            "{} bytes: {}",
            bytes.len(),
            String::from_utf8_lossy(&bytes[..300])
        );
    }
}

async fn http_get(addr: std::net::SocketAddr, path: &str, auth: bool) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let auth = if auth {
        format!("Authorization: Bearer {TOKEN}\r\n")
    } else {
        String::new()
    };
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

async fn http_post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        status,
        out.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    )
}

/// The real server (hyper with `limits`) over a real engine, on a loopback port.
struct Server {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(dir: &std::path::Path, limits: HttpLimits) -> Server {
        let app = router(state(dir, TestParams::Generate { seed: 0 }, limits.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve(listener, app, &limits, async move {
                let _ = stop_rx.await;
            })
            .await
        });
        Server { addr, stop, task }
    }

    /// Stops it and waits (bounded) until it has.
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops")
            .expect("server task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_within_the_header_timeout_while_healthz_and_a_job_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let timeout = Duration::from_millis(1500);
    let limits = HttpLimits {
        header_read_timeout: HumanDuration(timeout),
        // All 300 come from one address: this test is about the head
        // timeout, not the per-peer cap.
        max_connections_per_peer: 1024,
        ..HttpLimits::default()
    };
    let server = Server::start(dir.path(), limits).await;
    let addr = server.addr;

    // 300 connections that never finish a request head: silent, a partial
    // request line, slowloris headers, and keep-alive connections gone idle
    // after one request.
    let opened = Instant::now();
    let mut stalled = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let prefix: &[u8] = match i % 4 {
            0 => b"",
            1 => b"GET /heal",
            2 => b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: a",
            _ => b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
        };
        s.write_all(prefix).await.expect("write");
        stalled.push((i % 4, s));
    }
    // The server answers others meanwhile.
    assert_eq!(http_get(addr, "/healthz", false).await.0, 200);
    let (status, body) = http_post(
        addr,
        "/v1/jobs",
        r#"{"circuit": "chain", "size": 64, "rs_seed": 1}"#,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<SubmitResponse>(&body)
        .expect("job id")
        .job_id;

    // Every stalled connection is closed by the server, within the timeout
    // plus scheduling slack.
    let deadline = opened + timeout + Duration::from_secs(3);
    for (kind, mut s) in stalled {
        let mut buf = vec![0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Err(_) => panic!(
                    "stalled connection of kind {kind} still open after {:?}",
                    opened.elapsed()
                ),
                Ok(Ok(0)) | Ok(Err(_)) => break,
                // The idle keep-alive kind got its /healthz answer first.
                Ok(Ok(_)) => {}
            }
        }
    }
    assert!(
        opened.elapsed() >= timeout - Duration::from_millis(100),
        "closed before the timeout"
    );

    let (status, body) = http_get(addr, &format!("/v1/jobs/{id}/wait?timeout=60s"), true).await;
    assert_eq!(status, 200, "{body}");
    let job: JobStatus = serde_json::from_str(&body).expect("job status");
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert!(job.result.is_some_and(|r| r.verified));
    assert_eq!(http_get(addr, "/healthz", false).await.0, 200);
    server.stop().await;
}

/// Reads one HTTP/1 answer on `s` until the server closes it (bounded).
async fn read_answer(s: &mut TcpStream, within: Duration) -> Option<(u16, String)> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(within, s.read_to_end(&mut out)).await;
    if read.is_err() {
        return None;
    }
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    Some((status, text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_meet_one_deadline_oversized_ones_are_refused_at_once_and_probes_stay_answered(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let deadline = Duration::from_millis(1500);
    let limits = HttpLimits {
        body_read_timeout: HumanDuration(deadline),
        max_connections: 16,
        max_connections_per_peer: 6,
        probe_connections: 4,
        ..HttpLimits::default()
    };
    let server = Server::start(dir.path(), limits).await;
    let addr = server.addr;

    // Six bodies (this peer's whole cap) that trickle a byte every 200 ms,
    // well inside any per-chunk timeout: each must still end at the deadline.
    let opened = Instant::now();
    let mut tricklers = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!(
                "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write head");
        tricklers.push(tokio::spawn(async move {
            for _ in 0..100 {
                if s.write_all(b" ").await.is_err() {
                    break;
                }
                let mut peek = [0u8; 1];
                match tokio::time::timeout(Duration::from_millis(200), s.peek(&mut peek)).await {
                    Ok(Ok(n)) if n > 0 => break,
                    Ok(Ok(_)) | Ok(Err(_)) => break,
                    Err(_) => {}
                }
            }
            read_answer(&mut s, Duration::from_secs(10)).await
        }));
    }
    // Let the six take their slots.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The same peer, past its cap: probes are answered on the reserve, the
    // rest of the API is refused with a JSON 503, both at once.
    let t = Instant::now();
    assert_eq!(http_get(addr, "/healthz", false).await.0, 200);
    let (status, body) = http_get(addr, "/readyz", true).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_get(addr, "/status", true).await;
    assert_eq!(status, 503, "{body}");
    let err: ErrorBody = serde_json::from_str(&body).expect("JSON error");
    assert_eq!(err.error, "too_many_connections");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    for t in tricklers {
        let (status, text) = t.await.expect("trickler").expect("answered within 10 s");
        assert_eq!(status, 408, "{text}");
        assert!(text.contains("http.body_read_timeout"), "{text}");
    }
    let took = opened.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(3),
        "bodies ended after {took:?}, deadline {deadline:?}"
    );

    // A declared length over the limit is answered before any body is sent.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .expect("write head");
    let (status, text) = read_answer(&mut s, Duration::from_secs(1))
        .await
        .expect("413 without waiting for the body");
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("body_too_large"), "{text}");

    // With the slots back, the whole API answers this peer again.
    assert_eq!(http_get(addr, "/status", true).await.0, 200);
    server.stop().await;
}
