//! `cuzk.v1.ProvingEngine` over the daemon's engine: every RPC answers from
//! the same engine, jobs and metrics as the HTTP API.

use crate::daemon::api::AppState;
use crate::daemon::engine::jobs::job_ref;
use crate::daemon::engine::{Engine, Priority, SubmitError};
use crate::daemon::grpc::curio::{self, CurioError};
use crate::daemon::grpc::ids::{self, Claim, Refusal, RequestIds};
use crate::daemon::grpc::pb::{self, proving_engine_server::ProvingEngine};
use crate::daemon::grpc::srs::{CircuitId, SrsError};
use fleet_wire::api::{DaemonState, JobState, JobStatus};
use fleet_wire::timing::Phase;
use prost::Message as _;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// Submissions whose inputs are being checked at once (a 32 GiB C1's
/// vanilla proofs take seconds of CPU each); more wait their turn.
const CHECKS_AT_ONCE: usize = 2;
/// Longest one engine wait; a longer await loops, so a client that went
/// away is noticed (its future dropped) between waits.
const WAIT_STEP: Duration = Duration::from_secs(60);

pub struct Service {
    state: Arc<AppState>,
    ids: RequestIds,
    checks: tokio::sync::Semaphore,
}

impl Service {
    pub fn new(state: Arc<AppState>) -> Self {
        Self {
            state,
            ids: RequestIds::default(),
            checks: tokio::sync::Semaphore::new(CHECKS_AT_ONCE),
        }
    }

    fn engine(&self) -> Result<Arc<Engine>, Status> {
        match self.state.engine.get() {
            Some(e) => Ok(e.clone()),
            None => {
                let why = self
                    .state
                    .readiness
                    .get()
                    .1
                    .unwrap_or_else(|| "starting".into());
                Err(Status::unavailable(format!("not ready: {why}")))
            }
        }
    }

    /// The engine and the parameter file of Curio's `circuit_id`.
    fn parameter_set(
        &self,
        circuit_id: &str,
    ) -> Result<
        (
            Arc<Engine>,
            crate::filecoin::cache::CacheEntry,
            crate::filecoin::FilCircuit,
        ),
        Status,
    > {
        let id = CircuitId::parse(circuit_id).map_err(srs_status)?;
        let engine = self.engine()?;
        let failed = |e: crate::filecoin::FilecoinError| Status::failed_precondition(e.to_string());
        let circuit = id.circuit().map_err(srs_status)?.map_err(failed)?;
        let entry = crate::filecoin::kind::param_set(circuit)
            .cache_entry(engine.filecoin_dir())
            .map_err(failed)?;
        Ok((engine, entry, circuit))
    }

    /// Queues `req` (or attaches to the job its `request_id` started);
    /// returns the job id.
    async fn submit(&self, req: pb::SubmitProofRequest) -> Result<String, Status> {
        if req.request_id.len() > ids::MAX_ID_BYTES {
            return Err(Status::invalid_argument(format!(
                "request_id: {} bytes; at most {}",
                req.request_id.len(),
                ids::MAX_ID_BYTES
            )));
        }
        if self.state.readiness.get().0 == DaemonState::Draining {
            return Err(Status::unavailable(
                "draining: retry on the daemon that replaces this one",
            ));
        }
        let engine = self.engine()?;
        let fil = curio::translate(&req).map_err(curio_status)?;
        let priority = priority_of(req.priority)?;
        if req.request_id.is_empty() {
            return self
                .submit_to(&engine, fil, priority)
                .await
                .map_err(|(c, m)| Status::new(c, m));
        }
        // The payload is the request less its priority (a retry may carry
        // another one and still be the same proof).
        let mut payload = req.clone();
        payload.priority = 0;
        let digest = ids::digest(&payload.encode_to_vec());
        let live = |job: &str| {
            engine
                .job(job)
                .is_some_and(|s| !matches!(s.state, JobState::Failed | JobState::Cancelled))
        };
        let slot = match self.ids.claim(&req.request_id, digest, live) {
            Claim::New(slot) | Claim::Attach(slot) => slot,
            Claim::Conflict => {
                return Err(Status::already_exists(format!(
                    "request_id {:?} was used in the last hour for a different request; a retry must send the same one",
                    req.request_id
                )))
            }
        };
        let got = slot
            .get_or_init(|| async {
                self.submit_to(&engine, fil, priority)
                    .await
                    .map_err(|(code, message)| Refusal {
                        code: code as i32,
                        message,
                    })
            })
            .await
            .clone();
        match got {
            Ok(job) => {
                self.ids.bind(&req.request_id, &job);
                Ok(job)
            }
            Err(r) => {
                self.ids.release(&req.request_id, &slot);
                Err(Status::new(Code::from_i32(r.code), r.message))
            }
        }
    }

    async fn submit_to(
        &self,
        engine: &Arc<Engine>,
        fil: fleet_wire::api::FilecoinSubmitRequest,
        priority: Option<Priority>,
    ) -> Result<String, (Code, String)> {
        let _turn = self
            .checks
            .acquire()
            .await
            .map_err(|_| (Code::Unavailable, "shutting down".to_string()))?;
        let engine = engine.clone();
        match tokio::task::spawn_blocking(move || engine.submit_filecoin_as(&fil, priority)).await {
            Ok(Ok(job)) => Ok(job),
            Ok(Err(e)) => Err((submit_code(&e), e.to_string())),
            Err(e) => Err((Code::Internal, format!("checking the request: {e}"))),
        }
    }

    /// The job's answer once it finished, or TIMEOUT after `timeout`
    /// (`None`: until it finishes or the call's deadline drops this).
    async fn await_job(
        &self,
        job: &str,
        timeout: Option<Duration>,
    ) -> Result<pb::AwaitProofResponse, Status> {
        let engine = self.engine()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let step = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_STEP),
                None => WAIT_STEP,
            };
            let status = engine.wait(job, step).await.ok_or_else(|| {
                Status::not_found(format!(
                    "no job {} (unknown, or forgotten since it finished)",
                    job_ref(job)
                ))
            })?;
            if status.state.is_finished() {
                self.ids.finished_job(job);
                return Ok(answer(&status));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(pb::AwaitProofResponse {
                    job_id: job.to_string(),
                    status: pb::await_proof_response::Status::Timeout as i32,
                    ..Default::default()
                });
            }
        }
    }
}

/// The gRPC code of a refused submission: the client's input is
/// INVALID_ARGUMENT, a daemon that cannot take it now UNAVAILABLE (Curio
/// retries), a host missing parameters FAILED_PRECONDITION.
fn submit_code(e: &SubmitError) -> Code {
    match e {
        SubmitError::Draining | SubmitError::Busy(_) | SubmitError::NoDevice => Code::Unavailable,
        SubmitError::QueueFull { .. } => Code::ResourceExhausted,
        SubmitError::TooLarge { .. } => Code::ResourceExhausted,
        SubmitError::ParamsMissing(_) => Code::FailedPrecondition,
        SubmitError::Filecoin(f) if f.is_parameters() => Code::FailedPrecondition,
        _ => Code::InvalidArgument,
    }
}

/// The engine's priority for the request's (0: the kind's own; LOW is
/// NORMAL, the engine has nothing lower).
fn priority_of(p: i32) -> Result<Option<Priority>, Status> {
    use pb::Priority as P;
    match P::try_from(p) {
        Ok(P::Unspecified) => Ok(None),
        Ok(P::Low | P::Normal) => Ok(Some(Priority::Normal)),
        Ok(P::High) => Ok(Some(Priority::High)),
        Ok(P::Critical) => Ok(Some(Priority::Critical)),
        Err(_) => Err(Status::invalid_argument(format!(
            "priority {p} is not one of 0 to 4"
        ))),
    }
}

fn curio_status(e: CurioError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn ms(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

/// A finished job as Curio reads it.
fn answer(s: &JobStatus) -> pb::AwaitProofResponse {
    use pb::await_proof_response::Status as S;
    let mut out = pb::AwaitProofResponse {
        job_id: s.job_id.clone(),
        ..Default::default()
    };
    match s.state {
        JobState::Done => {
            let result = s.result.as_ref();
            match result.and_then(|r| r.proof.as_deref()).map(hex::decode) {
                Some(Ok(proof)) if result.is_some_and(|r| r.verified) => {
                    out.status = S::Completed as i32;
                    out.proof = proof;
                }
                _ => {
                    out.status = S::Failed as i32;
                    out.error_message = "the job finished without a verified proof".into();
                }
            }
            if let Some(r) = result {
                let phase = |p: Phase| r.timing.phases_ms.get(&p).copied().unwrap_or(0.0);
                out.total_ms = ms(r.timing.total_ms);
                out.queue_wait_ms = ms(phase(Phase::QueueWait));
                out.synthesis_ms = ms(phase(Phase::Synthesis));
                out.gpu_compute_ms =
                    ms(phase(Phase::NttKernels) + phase(Phase::Msm) + phase(Phase::Assembly));
            }
            out.srs_load_ms = s.params_load_ms.map_or(0, ms);
        }
        JobState::Failed => {
            out.status = S::Failed as i32;
            out.error_message = s.error.clone().unwrap_or_else(|| "failed".into());
        }
        JobState::Cancelled => {
            out.status = S::Cancelled as i32;
            out.error_message = s.error.clone().unwrap_or_default();
        }
        JobState::Queued | JobState::Running => out.status = S::Unknown as i32,
    }
    out
}

fn srs_status(e: SrsError) -> Status {
    Status::invalid_argument(e.to_string())
}

#[tonic::async_trait]
impl ProvingEngine for Service {
    async fn submit_proof(
        &self,
        request: Request<pb::SubmitProofRequest>,
    ) -> Result<Response<pb::SubmitProofResponse>, Status> {
        let job_id = self.submit(request.into_inner()).await?;
        let depth = self.engine()?.queue_stats().depth;
        Ok(Response::new(pb::SubmitProofResponse {
            job_id,
            queue_position: u32::try_from(depth.saturating_sub(1)).unwrap_or(u32::MAX),
            assigned_gpu: String::new(),
        }))
    }

    async fn await_proof(
        &self,
        request: Request<pb::AwaitProofRequest>,
    ) -> Result<Response<pb::AwaitProofResponse>, Status> {
        let r = request.into_inner();
        let timeout =
            (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms.min(86_400_000)));
        Ok(Response::new(self.await_job(&r.job_id, timeout).await?))
    }

    async fn prove(
        &self,
        request: Request<pb::ProveRequest>,
    ) -> Result<Response<pb::ProveResponse>, Status> {
        let submit = request
            .into_inner()
            .submit
            .ok_or_else(|| Status::invalid_argument("submit: missing"))?;
        let job = self.submit(submit).await?;
        let result = self.await_job(&job, None).await?;
        Ok(Response::new(pb::ProveResponse {
            result: Some(result),
        }))
    }

    async fn cancel_proof(
        &self,
        request: Request<pb::CancelProofRequest>,
    ) -> Result<Response<pb::CancelProofResponse>, Status> {
        let id = request.into_inner().job_id;
        let engine = self.engine()?;
        let before = engine
            .job(&id)
            .ok_or_else(|| Status::not_found(format!("no job {}", job_ref(&id))))?;
        engine.cancel(&id);
        Ok(Response::new(pb::CancelProofResponse {
            was_running: before.state == JobState::Running,
        }))
    }

    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let st = self.state.status();
        let memory = crate::health::gpu::memory();
        let gpus = st
            .devices
            .iter()
            .filter_map(|d| {
                let ordinal = d.ordinal?;
                let (total, free) = memory
                    .iter()
                    .find(|(i, _, _)| *i == ordinal)
                    .map_or((0, 0), |(_, t, f)| (*t, *f));
                Some(pb::GpuStatus {
                    ordinal,
                    name: d.name.clone().unwrap_or_default(),
                    vram_total_bytes: total,
                    vram_free_bytes: free,
                    // Curio's field holds one job: the first partition a
                    // worker of this device proves now.
                    current_job_id: d
                        .proving
                        .first()
                        .map(|p| p.job_id.clone())
                        .unwrap_or_default(),
                    current_proof_kind: d
                        .proving
                        .first()
                        .map(|p| p.circuit.clone())
                        .unwrap_or_default(),
                })
            })
            .collect();
        let mut loaded_srs = Vec::new();
        let mut queues = Vec::new();
        if let Some(engine) = self.state.engine.get() {
            for id in CircuitId::all() {
                let Ok(Ok(entry)) = id.cache_entry(engine.filecoin_dir()) else {
                    continue;
                };
                if let Some((bytes, users)) = engine.filecoin_loaded(&entry) {
                    loaded_srs.push(pb::SrsStatus {
                        circuit_id: id.name(),
                        tier: pb::srs_status::Tier::Hot as i32,
                        size_bytes: bytes,
                        ref_count: users,
                    });
                }
            }
            for (kind, (pending, running)) in engine.queues_by_circuit() {
                queues.push(pb::QueueStatus {
                    proof_kind: kind,
                    pending,
                    in_progress: running,
                });
            }
        }
        Ok(Response::new(pb::GetStatusResponse {
            gpus,
            loaded_srs,
            queues,
            total_proofs_completed: st.proofs_completed,
            total_proofs_failed: st.proofs_failed,
            uptime_seconds: st.uptime_s as u64,
            pinned_memory_bytes: st.pool.held_bytes,
            pinned_memory_limit_bytes: st.pool.max_bytes,
        }))
    }

    async fn get_metrics(
        &self,
        _: Request<pb::GetMetricsRequest>,
    ) -> Result<Response<pb::GetMetricsResponse>, Status> {
        Ok(Response::new(pb::GetMetricsResponse {
            prometheus_text: self.state.metrics_text(),
        }))
    }

    async fn preload_srs(
        &self,
        request: Request<pb::PreloadSrsRequest>,
    ) -> Result<Response<pb::PreloadSrsResponse>, Status> {
        let (engine, entry, circuit) = self.parameter_set(&request.into_inner().circuit_id)?;
        let t = Instant::now();
        let loaded = tokio::task::spawn_blocking(move || engine.preload_filecoin(&entry, circuit))
            .await
            .map_err(|e| Status::internal(format!("loading: {e}")))?
            .map_err(|e| Status::new(submit_code(&e), e.to_string()))?;
        Ok(Response::new(pb::PreloadSrsResponse {
            already_loaded: loaded,
            load_time_ms: if loaded {
                0
            } else {
                t.elapsed().as_millis() as u64
            },
        }))
    }

    async fn evict_srs(
        &self,
        request: Request<pb::EvictSrsRequest>,
    ) -> Result<Response<pb::EvictSrsResponse>, Status> {
        let (engine, entry, _) = self.parameter_set(&request.into_inner().circuit_id)?;
        let freed = engine.evict_filecoin(&entry);
        Ok(Response::new(pb::EvictSrsResponse {
            was_loaded: freed.is_some(),
            freed_bytes: freed.unwrap_or(0),
        }))
    }
}
