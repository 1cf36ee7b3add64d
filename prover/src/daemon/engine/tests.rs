//! The engine end to end on CPU backends, with a backend wrapper that
//! injects the faults a real device shows (a panic, a failed driver call)
//! around the real CPU backend's arithmetic.

use super::*;
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BackendError, BackendKind, BackendTimes, G1Bases, G2Bases};
use crate::params::TestParams;
use crate::pool::{HeapAllocator, HostAllocator, PoolError, PoolLimits, Region};
use blstrs::{G1Projective, G2Projective, Scalar};
use fleet_wire::api::JobState;
use std::sync::atomic::AtomicU32;

/// A gate the test opens: a fault waits behind it.
#[derive(Default)]
struct Gate {
    open: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock();
        // Bounded: a test that forgets to open it fails instead of hanging.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !*open {
            if self.opened.wait_until(&mut open, deadline).timed_out() {
                panic!("the test never opened the gate");
            }
        }
    }
}

#[derive(Clone)]
enum Fault {
    None,
    /// Panics in the first quotient, then works.
    PanicOnce,
    /// Every call fails as a dead GPU's driver does.
    Driver,
    /// As `Driver`, once the test opens the gate.
    DriverAfter(Arc<Gate>),
    /// The first call fails as a device out of memory does.
    OutOfMemoryOnce,
    /// Every call waits for the gate, then works.
    Hold(Arc<Gate>),
}

struct Faulty {
    inner: CpuBackend,
    fault: Fault,
    ordinal: u32,
    calls: AtomicU32,
    released: Arc<AtomicU32>,
}

impl Faulty {
    fn device(ordinal: u32, fault: Fault, workers: u32) -> Device {
        Self::device_counting(ordinal, fault, workers, Arc::default())
    }

    /// As [`Faulty::device`], counting `release_cached` calls in `released`.
    fn device_counting(
        ordinal: u32,
        fault: Fault,
        workers: u32,
        released: Arc<AtomicU32>,
    ) -> Device {
        let b = Faulty {
            inner: CpuBackend::with_threads(1).expect("cpu"),
            fault,
            ordinal,
            calls: AtomicU32::new(0),
            released,
        };
        Device::new(Arc::new(b), workers, Some(format!("test-{ordinal}")))
    }

    fn check(&self) -> Result<(), BackendError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if let Fault::DriverAfter(gate) | Fault::Hold(gate) = &self.fault {
            gate.wait();
        }
        match self.fault {
            Fault::PanicOnce if n == 0 => panic!("injected fault in the kernel"),
            Fault::OutOfMemoryOnce if n == 0 => Err(BackendError::Device {
                device: self.ordinal,
                call: "cuMemAlloc".into(),
                file: file!(),
                line: line!(),
                reason: "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")".into(),
            }),
            Fault::Driver | Fault::DriverAfter(_) => Err(BackendError::Device {
                device: self.ordinal,
                call: "cuLaunchKernel".into(),
                file: file!(),
                line: line!(),
                reason: "an illegal memory access was encountered".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl Backend for Faulty {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn device(&self) -> Option<u32> {
        Some(self.ordinal)
    }

    fn quotient(
        &self,
        a: &mut [Scalar],
        b: &mut [Scalar],
        c: &mut [Scalar],
        pinned: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        self.check()?;
        self.inner.quotient(a, b, c, pinned, times)
    }

    fn msm_g1(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError> {
        self.inner.msm_g1(bases, scalars, times)
    }

    fn msm_g2(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G2Projective, BackendError> {
        self.inner.msm_g2(bases, scalars, times)
    }

    fn release_cached(&self) -> u64 {
        self.released.fetch_add(1, Ordering::SeqCst);
        4096
    }
}

/// Pageable memory whose first region panics, as a buggy driver call
/// would inside synthesis's pool checkout.
#[derive(Default)]
struct PanicFirstAlloc {
    fired: AtomicBool,
}

impl HostAllocator for PanicFirstAlloc {
    fn name(&self) -> &'static str {
        "heap"
    }

    fn page_locked(&self) -> bool {
        false
    }

    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        if !self.fired.swap(true, Ordering::SeqCst) {
            panic!("injected fault in the allocator");
        }
        HeapAllocator.alloc(bytes)
    }

    unsafe fn free(&self, region: Region) {
        // SAFETY: every region handed out came from HeapAllocator.
        unsafe { HeapAllocator.free(region) }
    }
}

const SIZE: u64 = 64;

struct Rig {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    budget: Arc<MemoryBudget>,
    dir: tempfile::TempDir,
}

fn rig(devices: Vec<Device>, lookahead: u32) -> Rig {
    rig_on(devices, lookahead, Arc::new(HeapAllocator))
}

fn rig_on(devices: Vec<Device>, lookahead: u32, alloc: Arc<dyn HostAllocator>) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = MemoryBudget::new(256 << 20);
    let memory = MemoryPlan::new(256 << 20, None).expect("plan");
    let pool = PinnedPool::new(
        alloc,
        budget.clone(),
        PoolLimits {
            max_bytes: memory.pool,
            ..PoolLimits::default()
        },
    );
    let params = ParamStore::open(dir.path().join("params"))
        .expect("params")
        .with_test_params(TestParams::Generate {
            seed: crate::params::DEFAULT_SEED,
        })
        .with_budget(budget.clone());
    let metrics = Arc::new(Metrics::new("test", "test"));
    let timing =
        Arc::new(TimingLog::open(dir.path().join("timing.jsonl"), 1 << 20, 1).expect("log"));
    let engine = Engine::start(EngineParts {
        pool,
        budget: budget.clone(),
        memory,
        params: Arc::new(params),
        devices,
        unavailable: Vec::new(),
        timing,
        metrics: metrics.clone(),
        filecoin: crate::daemon::engine::filecoin::FilecoinKeys::new(std::env::temp_dir(), false),
        // Every rig synthesises from compiled constraints, the first
        // partition of each checked, as a daemon does by default.
        compiled: crate::daemon::engine::compiled::CompiledSet::new(true, 1),
        concurrency: 2,
        lookahead,
        max_jobs: 16,
        host: "test".into(),
        build: "test".into(),
    })
    .expect("engine");
    Rig {
        engine: Arc::new(engine),
        metrics,
        budget,
        dir,
    }
}

fn submit(engine: &Engine, partitions: u32) -> String {
    engine
        .submit(SubmitRequest {
            circuit: "chain".into(),
            size: SIZE,
            partitions,
            seed: 7,
            rs_seed: Some(11),
        })
        .expect("accepted")
}

/// The job's final status; a bounded wait (a stuck engine fails the test).
fn finished(engine: &Engine, id: &str) -> JobStatus {
    for _ in 0..6000 {
        let s = engine.job(id).expect("known job");
        if s.state.is_finished() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("job {id} did not finish within 60 s");
}

/// Shuts the engine down, failing the test if its threads do not end.
fn stop(engine: &Arc<Engine>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let e = engine.clone();
    std::thread::spawn(move || {
        e.shutdown();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the engine's threads end within 30 s of shutdown");
}

fn proofs(s: &JobStatus) -> Vec<String> {
    let r = s.result.as_ref().expect("a result");
    assert!(r.verified);
    r.proofs.iter().map(|p| p.proof.clone()).collect()
}

#[test]
fn a_panic_while_proving_fails_only_that_job_and_the_engine_carries_on() {
    let rig = rig(vec![Faulty::device(0, Fault::PanicOnce, 1)], 1);
    let bad = finished(&rig.engine, &submit(&rig.engine, 1));
    assert_eq!(bad.state, JobState::Failed);
    let error = bad.error.expect("an error");
    assert!(
        error.contains("panicked: injected fault in the kernel"),
        "{error}"
    );
    let good = finished(&rig.engine, &submit(&rig.engine, 2));
    assert_eq!(good.state, JobState::Done, "{:?}", good.error);
    assert_eq!(proofs(&good).len(), 2);
    // A panic is no device fault: the device stays in rotation.
    assert!(rig.engine.devices()[0].in_rotation);
    stop(&rig.engine);
}

#[test]
fn a_panic_in_synthesis_fails_only_that_job_and_leaks_no_memory() {
    let rig = rig_on(
        vec![Faulty::device(0, Fault::None, 1)],
        1,
        Arc::new(PanicFirstAlloc::default()),
    );
    let bad = finished(&rig.engine, &submit(&rig.engine, 1));
    assert_eq!(bad.state, JobState::Failed);
    let error = bad.error.expect("an error");
    assert!(
        error.contains("panicked: injected fault in the allocator"),
        "{error}"
    );
    let good = finished(&rig.engine, &submit(&rig.engine, 3));
    assert_eq!(good.state, JobState::Done, "{:?}", good.error);
    assert_eq!(proofs(&good).len(), 3);
    stop(&rig.engine);
    // What stays reserved is the pool's idle regions, the loaded
    // parameters and their compiled constraints; the failed partition left
    // nothing behind.
    let stages = &rig.engine.shared.stages;
    let kept =
        stages.pool.stats().bytes_pinned + stages.params.loaded_bytes() + stages.compiled_bytes();
    assert!(
        stages.compiled_bytes() > 0,
        "the rig proved from compiled constraints"
    );
    assert_eq!(rig.budget.stats().reserved, kept);
}

#[test]
fn a_device_whose_driver_fails_leaves_the_rotation_and_another_proves_its_partitions() {
    let rig = rig(
        vec![
            Faulty::device(0, Fault::Driver, 1),
            Faulty::device(1, Fault::None, 1),
        ],
        2,
    );
    let s = finished(&rig.engine, &submit(&rig.engine, 4));
    assert_eq!(s.state, JobState::Done, "{:?}", s.error);
    let r = s.result.as_ref().expect("result");
    assert!(
        r.proofs.iter().all(|p| p.device == Some(1)),
        "{:?}",
        r.proofs
    );
    let devices = rig.engine.devices();
    assert!(!devices[0].in_rotation);
    let why = devices[0].error.as_deref().unwrap_or_default();
    assert!(why.contains("illegal memory access"), "{why}");
    assert!(devices[1].in_rotation && devices[1].error.is_none());
    let text = rig.metrics.render(&Default::default());
    assert!(
        text.contains("prover_device_in_rotation{device=\"0\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("prover_device_in_rotation{device=\"1\"} 1"),
        "{text}"
    );
    // The same bytes as a healthy engine gives.
    let healthy = rig_proofs(vec![Faulty::device(0, Fault::None, 1)], 1, 4);
    assert_eq!(proofs(&s), healthy);
    stop(&rig.engine);
}

#[test]
fn when_the_last_device_fails_its_job_fails_and_new_jobs_are_refused() {
    let rig = rig(vec![Faulty::device(3, Fault::Driver, 1)], 1);
    let s = finished(&rig.engine, &submit(&rig.engine, 2));
    assert_eq!(s.state, JobState::Failed);
    // Whichever partition is recorded first names the job's error: the
    // driver's, or that no device is left for the other partition.
    let error = s.error.expect("error");
    assert!(
        error.contains("illegal memory access") || error.contains("no device is left in rotation"),
        "{error}"
    );
    let why = rig.engine.devices()[0].error.clone().unwrap_or_default();
    assert!(why.contains("illegal memory access"), "{why}");
    let refused = rig.engine.submit(SubmitRequest {
        circuit: "chain".into(),
        size: SIZE,
        partitions: 1,
        seed: 0,
        rs_seed: None,
    });
    assert!(matches!(refused, Err(SubmitError::NoDevice)), "{refused:?}");
    stop(&rig.engine);
}

#[test]
fn shutdown_ends_after_the_last_device_failed_with_partitions_waiting() {
    // The device fails only once four synthesised partitions wait for it:
    // they are failed, and their lookahead slots must come back, or a
    // synthesis worker waits for one for ever and shutdown never ends.
    let gate = Arc::new(Gate::default());
    let rig = rig(
        vec![Faulty::device(0, Fault::DriverAfter(gate.clone()), 1)],
        4,
    );
    let id = submit(&rig.engine, 8);
    let mut waited = 0;
    while rig.engine.shared.queue.waiting() < 4 {
        waited += 1;
        assert!(
            waited < 6000,
            "four partitions never queued for the device: {} waiting, {:?}, {:?}, {:?}",
            rig.engine.shared.queue.waiting(),
            rig.engine.job(&id).map(|j| j.error),
            rig.engine.queue_stats(),
            (rig.engine.shared.stages.pool.stats(), rig.budget.stats()),
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    gate.open();
    let s = finished(&rig.engine, &id);
    assert_eq!(s.state, JobState::Failed);
    stop(&rig.engine);
}

fn rig_proofs(devices: Vec<Device>, lookahead: u32, partitions: u32) -> Vec<String> {
    let rig = rig(devices, lookahead);
    let s = finished(&rig.engine, &submit(&rig.engine, partitions));
    assert_eq!(s.state, JobState::Done, "{:?}", s.error);
    stop(&rig.engine);
    proofs(&s)
}

#[test]
fn two_workers_two_devices_or_no_pipeline_give_the_same_bytes() {
    let one = rig_proofs(vec![Faulty::device(0, Fault::None, 1)], 1, 4);
    assert_eq!(one.len(), 4);
    let two_workers = rig_proofs(vec![Faulty::device(0, Fault::None, 2)], 2, 4);
    assert_eq!(one, two_workers);
    let two_devices = rig_proofs(
        vec![
            Faulty::device(0, Fault::None, 1),
            Faulty::device(1, Fault::None, 1),
        ],
        2,
        4,
    );
    assert_eq!(one, two_devices);
    let unpipelined = rig_proofs(vec![Faulty::device(0, Fault::None, 2)], 0, 4);
    assert_eq!(one, unpipelined);
}

#[test]
fn a_device_taken_out_from_outside_finishes_nothing_more_and_the_other_proves() {
    let rig = rig(
        vec![
            Faulty::device(4, Fault::None, 1),
            Faulty::device(6, Fault::None, 1),
        ],
        2,
    );
    assert!(!rig.engine.take_out(5, "no such device"));
    assert!(rig.engine.take_out(4, "critical XID 79 reported by NVML"));
    assert!(
        !rig.engine.take_out(4, "again"),
        "a device already out is not taken out twice"
    );
    let s = finished(&rig.engine, &submit(&rig.engine, 3));
    assert_eq!(s.state, JobState::Done, "{:?}", s.error);
    let r = s.result.as_ref().expect("result");
    assert!(
        r.proofs.iter().all(|p| p.device == Some(6)),
        "{:?}",
        r.proofs
    );
    let devices = rig.engine.devices();
    assert!(!devices[0].in_rotation);
    assert_eq!(
        devices[0].error.as_deref(),
        Some("critical XID 79 reported by NVML")
    );
    assert_eq!(devices[0].partitions_done, 0);
    let text = rig.metrics.render(&Default::default());
    assert!(
        text.contains("prover_device_in_rotation{device=\"4\"} 0"),
        "{text}"
    );
    stop(&rig.engine);
}

#[test]
fn without_an_rs_seed_two_proofs_of_one_witness_differ_and_both_verify() {
    let rig = rig(vec![Faulty::device(0, Fault::None, 1)], 1);
    let unseeded = || {
        let id = rig
            .engine
            .submit(SubmitRequest {
                circuit: "chain".into(),
                size: SIZE,
                partitions: 1,
                seed: 7,
                rs_seed: None,
            })
            .expect("accepted");
        let s = finished(&rig.engine, &id);
        assert_eq!(s.state, JobState::Done, "{:?}", s.error);
        assert!(s.result.as_ref().is_some_and(|r| r.verified));
        proofs(&s)
    };
    let (a, b) = (unseeded(), unseeded());
    assert_ne!(a, b, "r, s from the OS must differ between proofs");
    stop(&rig.engine);
}

#[test]
fn an_out_of_memory_error_frees_the_device_and_retries_without_taking_it_out() {
    let released = Arc::new(AtomicU32::new(0));
    let rig = rig(
        vec![Faulty::device_counting(
            0,
            Fault::OutOfMemoryOnce,
            1,
            released.clone(),
        )],
        1,
    );
    let s = finished(&rig.engine, &submit(&rig.engine, 1));
    assert_eq!(s.state, JobState::Done, "{:?}", s.error);
    assert!(s.result.as_ref().is_some_and(|r| r.verified));
    assert_eq!(
        released.load(Ordering::SeqCst),
        1,
        "the device freed its caches once"
    );
    let dev = &rig.engine.devices()[0];
    assert!(
        dev.in_rotation,
        "a recoverable error took the device out: {dev:?}"
    );
    assert_eq!(dev.error, None);
    let text = rig.metrics.render(&Default::default());
    assert!(
        text.contains("prover_device_recovered_errors_total{device=\"0\"} 1"),
        "{text}"
    );
    // The same bytes as a device that never failed.
    assert_eq!(
        proofs(&s),
        rig_proofs(vec![Faulty::device(0, Fault::None, 1)], 1, 1)
    );
    stop(&rig.engine);
}

#[test]
fn a_critical_xid_through_the_watch_seam_takes_the_gpu_out_while_its_partition_finishes() {
    let gate = Arc::new(Gate::default());
    let rig = rig(vec![Faulty::device(4, Fault::Hold(gate.clone()), 1)], 1);
    let id = submit(&rig.engine, 1);
    let mut waited = 0;
    while rig.engine.devices()[0].busy == 0 {
        waited += 1;
        assert!(waited < 6000, "the partition never reached the device");
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = |ev| rig.engine.on_xid(&ev);
    // A non-critical XID is counted and changes nothing.
    report(crate::daemon::xid_watch::XidEvent {
        ordinal: 4,
        xid: Some(13),
        critical: false,
    });
    assert!(rig.engine.devices()[0].in_rotation);
    report(crate::daemon::xid_watch::XidEvent {
        ordinal: 4,
        xid: Some(79),
        critical: true,
    });
    let dev = rig.engine.devices()[0].clone();
    assert!(!dev.in_rotation);
    assert_eq!(
        dev.error.as_deref(),
        Some("critical XID 79 reported by NVML")
    );
    // The partition on the device when the XID came still finishes.
    gate.open();
    let s = finished(&rig.engine, &id);
    assert_eq!(s.state, JobState::Done, "{:?}", s.error);
    assert!(s.result.as_ref().is_some_and(|r| r.verified));
    let text = rig.metrics.render(&Default::default());
    for series in [
        "prover_device_xids_total{device=\"4\",xid=\"79\"} 1",
        "prover_device_xids_total{device=\"4\",xid=\"13\"} 1",
        "prover_device_in_rotation{device=\"4\"} 0",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    let refused = rig.engine.submit(SubmitRequest {
        circuit: "chain".into(),
        size: SIZE,
        partitions: 1,
        seed: 0,
        rs_seed: None,
    });
    assert!(matches!(refused, Err(SubmitError::NoDevice)), "{refused:?}");
    stop(&rig.engine);
}

#[test]
fn a_job_cancelled_while_its_parameters_are_generated_is_never_proved() {
    // chain 2^14 has no parameters yet: generating them takes the synthesis
    // worker a while, during which the job is cancelled.
    let rig = rig(vec![Faulty::device(0, Fault::None, 1)], 1);
    let id = rig
        .engine
        .submit(SubmitRequest {
            circuit: "chain".into(),
            size: 1 << 14,
            partitions: 1,
            seed: 1,
            rs_seed: Some(1),
        })
        .expect("accepted");
    let mut waited = 0;
    while rig.engine.queue_stats().partitions_in_flight == 0 {
        waited += 1;
        assert!(waited < 6000, "the partition was never picked up");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = rig.engine.cancel(&id).expect("known job");
    assert_eq!(s.state, JobState::Cancelled, "{s:?}");
    let mut waited = 0;
    while rig.engine.queue_stats().partitions_in_flight > 0 {
        waited += 1;
        assert!(waited < 12000, "the cancelled partition never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        rig.engine.devices()[0].partitions_done,
        0,
        "a cancelled partition was proved"
    );
    stop(&rig.engine);
}

/// The TIMELINE events of the rig's timing log, in the order written.
fn timeline(rig: &Rig) -> Vec<fleet_wire::timing::TimelineEvent> {
    let text = std::fs::read_to_string(rig.dir.path().join("timing.jsonl")).expect("timing log");
    text.lines()
        .filter_map(|l| match fleet_wire::timing::TimingLine::parse(l) {
            Ok(fleet_wire::timing::TimingLine::Timeline(e)) => Some(e),
            _ => None,
        })
        .collect()
}

/// Waits (bounded) until `done` holds; `what` names it in the failure.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what}: not within 60 s");
}

/// (job, partition) of each `kind` event, in the order they were written.
fn order_of(
    events: &[fleet_wire::timing::TimelineEvent],
    kind: fleet_wire::timing::TimelineKind,
) -> Vec<(String, u32)> {
    events
        .iter()
        .filter(|e| e.event == kind)
        .map(|e| (e.job_id.clone(), e.partition))
        .collect()
}

/// A one-partition chain job queued at `priority`, as `submit_filecoin`
/// queues a PoSt (the priority is the engine's, so a small bundled circuit
/// stands for the PoSt).
fn one_partition_at(engine: &Engine, priority: Priority) -> String {
    engine
        .enqueue(
            JobSpec {
                circuit: "chain".into(),
                size: SIZE,
                partitions: 1,
                sector_size: None,
                priority,
                params_load_ms: None,
            },
            Circuit::Bundled(crate::statement::bundled::BundledStatement {
                kind: CircuitKind::Chain,
                size: SIZE,
                witness_seed: 3,
                partitions: 1,
            }),
            crate::prove::Blinding::from_seed(Some(5)),
        )
        .expect("accepted")
}

/// One device worker, held (until the gate opens) on the first partition of
/// a `backlog`-partition job; `lookahead` more partitions are synthesised and
/// wait for the device, the rest wait for a synthesis worker.
fn held_backlog(lookahead: u32, backlog: u32) -> (Rig, Arc<Gate>, String) {
    let gate = Arc::new(Gate::default());
    let rig = rig(
        vec![Faulty::device(0, Fault::Hold(gate.clone()), 1)],
        lookahead,
    );
    let job = submit(&rig.engine, backlog);
    wait_for("the backlog holds the device and the lookahead", || {
        rig.engine.devices()[0].busy == 1 && rig.engine.shared.queue.waiting() == lookahead as usize
    });
    (rig, gate, job)
}

#[test]
fn an_urgent_job_behind_a_backlog_is_synthesised_and_proved_before_the_backlog() {
    use fleet_wire::timing::TimelineKind::{GpuStart, SynthesisStart};
    // One device worker, held on the backlog's first partition; `LOOKAHEAD`
    // more are synthesised and wait for the device, the rest wait for a
    // synthesis worker (both are busy only with waiting for a slot).
    const LOOKAHEAD: u32 = 2;
    const BACKLOG: u32 = 6;
    let (rig, gate, backlog) = held_backlog(LOOKAHEAD, BACKLOG);
    let queued = || rig.engine.shared.queue.waiting();
    // What `submit_filecoin` does for a WinningPoSt: the urgency is the
    // engine's, so a small bundled circuit stands for the PoSt here.
    assert!(fleet_wire::api::FilecoinKind::WinningPost.is_urgent());
    let urgent = one_partition_at(&rig.engine, Priority::Critical);
    wait_for("the urgent partition is synthesised and queued", || {
        queued() == LOOKAHEAD as usize + 1
    });
    gate.open();
    for id in [&backlog, &urgent] {
        let s = finished(&rig.engine, id);
        assert_eq!(s.state, JobState::Done, "{id}: {:?}", s.error);
    }
    stop(&rig.engine);
    let events = timeline(&rig);

    // Synthesis: after the partitions synthesised before it came, ahead of
    // every partition still waiting for a synthesis worker.
    let synthesised = order_of(&events, SynthesisStart);
    assert_eq!(synthesised.len(), BACKLOG as usize + 1, "{synthesised:?}");
    let at = synthesised
        .iter()
        .position(|(job, _)| job == &urgent)
        .expect("the urgent job was synthesised");
    assert_eq!(at, LOOKAHEAD as usize + 1, "{synthesised:?}");
    let mut before: Vec<u32> = synthesised[..at].iter().map(|(_, p)| *p).collect();
    before.sort_unstable();
    assert_eq!(
        before,
        (0..=LOOKAHEAD).collect::<Vec<_>>(),
        "{synthesised:?}"
    );

    // Device: right after the backlog's partition the device held when it
    // came, ahead of the synthesised partitions queued before it. (Which
    // backlog partition is where depends on which of the two synthesis
    // workers finished first.)
    let proved = order_of(&events, GpuStart);
    assert_eq!(proved.len(), BACKLOG as usize + 1, "{proved:?}");
    assert_eq!(proved[0].0, backlog, "{proved:?}");
    assert_eq!(proved[1], (urgent.clone(), 0), "{proved:?}");
    let mut backlog_partitions: Vec<u32> = proved
        .iter()
        .filter(|(job, _)| job == &backlog)
        .map(|(_, p)| *p)
        .collect();
    backlog_partitions.sort_unstable();
    assert_eq!(
        backlog_partitions,
        (0..BACKLOG).collect::<Vec<_>>(),
        "{proved:?}"
    );
}

#[test]
fn a_high_priority_job_is_synthesised_before_a_normal_backlog_waiting_for_a_worker() {
    use fleet_wire::timing::TimelineKind::SynthesisStart;
    const LOOKAHEAD: u32 = 2;
    const BACKLOG: u32 = 6;
    let (rig, gate, backlog) = held_backlog(LOOKAHEAD, BACKLOG);
    // What `submit_filecoin` gives a WindowPoSt.
    assert_eq!(
        crate::filecoin::post::PostKind::Window.priority(),
        Priority::High
    );
    let high = one_partition_at(&rig.engine, Priority::High);
    gate.open();
    for id in [&backlog, &high] {
        let s = finished(&rig.engine, id);
        assert_eq!(s.state, JobState::Done, "{id}: {:?}", s.error);
    }
    stop(&rig.engine);
    // Synthesised right after the partitions that already held a worker or
    // a slot when it came, ahead of the rest of the backlog.
    let synthesised = order_of(&timeline(&rig), SynthesisStart);
    let at = synthesised
        .iter()
        .position(|(job, _)| job == &high)
        .expect("the high job was synthesised");
    assert!(at <= LOOKAHEAD as usize + 1, "{synthesised:?}");
    assert!(
        synthesised[at + 1..].iter().all(|(job, _)| job == &backlog),
        "{synthesised:?}"
    );
    assert!(
        synthesised.len() - at > (BACKLOG - LOOKAHEAD - 2) as usize,
        "{synthesised:?}"
    );
}
