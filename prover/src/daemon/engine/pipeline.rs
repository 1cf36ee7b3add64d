//! The engine's threads and what flows between them:
//!
//! ```text
//! tasks ─▶ synthesis workers ─▶ device queue (scheduler) ─▶ device workers ─▶ verifiers ─▶ jobs
//! ```
//!
//! With `lookahead = 0` the device workers take unsynthesised tasks from the
//! device queue and synthesise them themselves (pipelining off). A device
//! whose driver fails is taken out of rotation; the partition it held is
//! tried once more on another device.

use crate::daemon::engine::devices::Device;
use crate::daemon::engine::jobs::{Jobs, Recorded};
use crate::daemon::engine::partition::{
    Failed, Outcome, PartitionError, Priority, Proved, Ready, Stages, Task, WorkKey,
};
use crate::daemon::engine::scheduler::DeviceQueue;
use crate::daemon::metrics::Metrics;
use crossbeam_channel::{Receiver, Sender};
use fleet_wire::api::DeviceState;
use fleet_wire::timing::{ProofRecord, TIMING_SCHEMA_VERSION};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Tries of one partition when devices fail under it.
const MAX_ATTEMPTS: u32 = 2;

/// What a device worker takes: a synthesised partition (and whether it
/// holds a lookahead slot: urgent ones do not), or (pipelining off) a task
/// it synthesises itself.
pub enum Work {
    Ready(Box<Ready>, bool),
    Task(Task),
}

/// The synthesis workers' inputs, taken in priority order: urgent, high,
/// normal.
#[derive(Clone)]
pub struct TaskQueue {
    pub urgent: Receiver<Task>,
    pub high: Receiver<Task>,
    pub normal: Receiver<Task>,
}

impl TaskQueue {
    /// The next task, of the highest priority that waits; `None` once every
    /// input is closed and empty.
    fn recv(&self) -> Option<Task> {
        use crossbeam_channel::TryRecvError;
        let inputs = [&self.urgent, &self.high, &self.normal];
        loop {
            let mut open = Vec::with_capacity(inputs.len());
            for rx in inputs {
                match rx.try_recv() {
                    Ok(t) => return Some(t),
                    Err(TryRecvError::Empty) => open.push(rx),
                    Err(TryRecvError::Disconnected) => {}
                }
            }
            if open.is_empty() {
                return None;
            }
            // Sleep until an open input has a task or closes, then take in
            // priority order again.
            let mut sel = crossbeam_channel::Select::new();
            for rx in open {
                sel.recv(rx);
            }
            sel.ready();
        }
    }
}

/// Everything the engine's threads share.
pub struct Shared {
    pub jobs: Mutex<Jobs>,
    /// Bumped on every job state change; waiters re-check their job.
    pub changed: tokio::sync::watch::Sender<u64>,
    pub tasks_tx: Mutex<Option<Sender<Task>>>,
    /// Urgent tasks (WinningPoSt), taken before any other.
    pub urgent_tx: Mutex<Option<Sender<Task>>>,
    /// High-priority tasks (WindowPoSt), taken before normal ones.
    pub high_tx: Mutex<Option<Sender<Task>>>,
    pub verify_tx: Mutex<Option<Sender<Box<Proved>>>>,
    pub accepting: AtomicBool,
    pub pipelined: bool,
    pub stages: Stages,
    pub devices: Vec<Device>,
    /// Devices named in the config that could not be opened.
    pub unavailable: Vec<DeviceState>,
    pub queue: DeviceQueue<WorkKey, Work>,
    /// Returns a lookahead slot (pipelined only): a device worker gives one
    /// back when it picks a synthesised partition up, and so must whoever
    /// fails one that no device will pick up, or a synthesis worker waits
    /// for it for ever.
    pub slot_tx: Option<Sender<()>>,
    pub metrics: std::sync::Arc<Metrics>,
    pub max_jobs: u32,
    pub partitions_in_flight: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub last_proof_ms: AtomicU64,
}

impl Shared {
    pub fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Marks the job running; false when it was cancelled meanwhile.
    fn start_partition(&self, task: &Task) -> bool {
        if task.is_cancelled() || !self.jobs.lock().start(&task.job_id) {
            return false;
        }
        self.partitions_in_flight.fetch_add(1, Ordering::SeqCst);
        self.bump();
        true
    }

    /// Queues a task for the next stage (synthesis, or a device when
    /// pipelining is off); hands it back when that stage is closed.
    pub fn dispatch(&self, task: Task) -> Result<(), Task> {
        if self.pipelined {
            let tx = match task.priority {
                Priority::Critical => &self.urgent_tx,
                Priority::High => &self.high_tx,
                Priority::Normal => &self.tasks_tx,
            };
            match tx.lock().as_ref() {
                // Receivers live as long as the workers, which outlive the sender.
                Some(tx) => tx.send(task).map_err(|e| e.into_inner()),
                None => Err(task),
            }
        } else {
            let key = task.key();
            let urgent = task.urgent();
            self.to_devices(key, Work::Task(task), urgent)
                .map_err(|w| match w {
                    Work::Task(t) => t,
                    Work::Ready(r, _) => r.task,
                })
        }
    }

    /// Queues work for the devices, urgent work ahead of the rest.
    fn to_devices(&self, key: WorkKey, work: Work, urgent: bool) -> Result<(), Work> {
        match urgent {
            true => self.queue.push_front(key, work),
            false => self.queue.push(key, work),
        }
    }

    /// Writes a partition's record and counts it in its job.
    fn finish(&self, out: Outcome) {
        if let Err(e) = self.stages.timing.partition(&out.record) {
            tracing::warn!("timing log: {e}");
        }
        self.metrics.partition_done(&out.record);
        self.metrics
            .device_busy(out.record.device, out.record.device_busy_ms);
        self.metrics.device_partition(out.record.device);
        self.partitions_in_flight.fetch_sub(1, Ordering::SeqCst);
        let task = &out.task;
        let recorded = self.jobs.lock().record(
            &task.job_id,
            task.partition,
            &out.record.phases_ms,
            out.proof,
        );
        if let Recorded::Finished(done) = recorded {
            let ok = done.state == fleet_wire::api::JobState::Done;
            match ok {
                true => self.completed.fetch_add(1, Ordering::SeqCst),
                false => self.failed.fetch_add(1, Ordering::SeqCst),
            };
            let now = crate::sys::clock::unix_millis();
            self.last_proof_ms.store(now, Ordering::SeqCst);
            self.metrics.job_done(ok, done.total_ms);
            let rec = ProofRecord {
                v: TIMING_SCHEMA_VERSION,
                ts_ms: now,
                tag: out.record.tag.clone(),
                partitions: done.partitions,
                backend: self.stages.backend.as_str().to_string(),
                verified: Some(ok),
                total_ms: done.total_ms,
                error: done.error,
            };
            if let Err(e) = self.stages.timing.proof(&rec) {
                tracing::warn!("timing log: {e}");
            }
        }
        self.bump();
    }

    fn give_slot(&self) {
        if let Some(tx) = &self.slot_tx {
            let _ = tx.send(());
        }
    }

    fn fail(&self, f: Failed) {
        let out = self.stages.failed(f);
        self.finish(out);
    }

    /// A device's driver failed: out of rotation it goes, with a log line
    /// and a metric; work nobody can take any more fails.
    pub(super) fn take_out(&self, d: usize, why: &str) {
        let dev = &self.devices[d];
        if dev.fail(why.to_string()) {
            let ordinal = dev.ordinal(d);
            tracing::error!(
                device = ordinal,
                error = why,
                "device taken out of rotation"
            );
            self.metrics.device_failed(ordinal);
        }
        for work in self.queue.fail_device(d) {
            let failed = match work {
                Work::Ready(r, slot) => {
                    if slot {
                        self.give_slot();
                    }
                    r.fail(&self.stages, PartitionError::NoDevice)
                }
                Work::Task(t) => self.stages.refuse(t, PartitionError::NoDevice),
            };
            self.fail(failed);
        }
    }

    /// Back from device `d`: on to verification, or (the device failed
    /// under it) out of rotation with the device and the partition tried
    /// again elsewhere.
    fn proved(&self, d: usize, proved: Proved) {
        let error = proved.outcome.as_ref().err();
        let fault = error.and_then(|e| e.device_fault());
        let recoverable = error.is_some_and(|e| e.recoverable_on_device());
        if fault.is_some() || recoverable {
            match &fault {
                Some(why) => self.take_out(d, why),
                None => {
                    let dev = &self.devices[d];
                    let freed = dev.backend.release_cached();
                    tracing::warn!(
                        device = dev.ordinal(d),
                        freed_bytes = freed,
                        error = %error.map(|e| e.to_string()).unwrap_or_default(),
                        "recoverable device error: freed what the device held; the device stays in rotation"
                    );
                    self.metrics.device_recovered(dev.ordinal(d));
                }
            }
            let mut task = proved.task.clone();
            let retry = task.attempt + 1 < MAX_ATTEMPTS && self.queue.healthy_devices() > 0;
            if retry {
                // The failed try is recorded, but not counted in the job.
                let out = self.stages.verify(proved);
                if let Err(e) = self.stages.timing.partition(&out.record) {
                    tracing::warn!("timing log: {e}");
                }
                self.partitions_in_flight.fetch_sub(1, Ordering::SeqCst);
                task.attempt += 1;
                tracing::warn!(job = %task.job_id, partition = task.partition, "retrying the partition on another device");
                if let Err(task) = self.dispatch(task) {
                    let f = self.stages.refuse(task, PartitionError::ShuttingDown);
                    self.partitions_in_flight.fetch_add(1, Ordering::SeqCst);
                    self.fail(f);
                }
                return;
            }
        }
        let tx = self.verify_tx.lock().clone();
        if let Some(Err(e)) = tx.map(|tx| tx.send(Box::new(proved))) {
            // Verifiers gone (cannot happen before the device workers
            // are joined): verify here rather than lose the partition.
            let out = self.stages.verify(*e.into_inner());
            self.finish(out);
        }
    }
}

impl Ready {
    /// A synthesised partition that cannot reach a device after all.
    fn fail(self: Box<Self>, stages: &Stages, error: PartitionError) -> Failed {
        let task = self.task.clone();
        drop(self);
        stages.refuse(task, error)
    }
}

pub fn synthesis_worker(
    shared: &Shared,
    tasks: TaskQueue,
    (slot_tx, slot_rx): (Sender<()>, Receiver<()>),
) {
    // Slots are only ever returned, never dropped, so a worker waiting for
    // one at shutdown gets it and sees the closed task queue.
    while slot_rx.recv().is_ok() {
        let Some(task) = tasks.recv() else {
            let _ = slot_tx.send(());
            return;
        };
        if !synthesize_and_queue(shared, task, true) {
            let _ = slot_tx.send(());
        }
    }
}

/// Synthesises urgent tasks only, holding no lookahead slot, so an urgent
/// task never waits behind the pipeline's backlog.
pub fn urgent_worker(shared: &Shared, tasks: Receiver<Task>) {
    while let Ok(task) = tasks.recv() {
        synthesize_and_queue(shared, task, false);
    }
}

/// Synthesises `task` and queues it for the devices; false when it ended
/// here (so a slot it held must be given back).
fn synthesize_and_queue(shared: &Shared, task: Task, slot: bool) -> bool {
    if !shared.start_partition(&task) {
        return false;
    }
    match shared.stages.synthesize(task, None) {
        Ok(r) => {
            shared.stages.queued(&r, None);
            let key = r.task.key();
            let urgent = r.task.urgent();
            match shared.to_devices(key, Work::Ready(Box::new(r), slot), urgent) {
                Ok(()) => true,
                Err(w) => {
                    let error = match shared.queue.healthy_devices() {
                        0 => PartitionError::NoDevice,
                        _ => PartitionError::ShuttingDown,
                    };
                    let f = match w {
                        Work::Ready(r, _) => r.fail(&shared.stages, error),
                        Work::Task(t) => shared.stages.refuse(t, error),
                    };
                    shared.fail(f);
                    false
                }
            }
        }
        Err(f) => {
            shared.fail(*f);
            false
        }
    }
}

/// Device `d`'s worker: takes what the scheduler gives it until the queue
/// closes or the device leaves the rotation.
pub fn device_worker(shared: &Shared, d: usize) {
    let dev = &shared.devices[d];
    let ordinal = dev.ordinal(d);
    while let Some((lease, work)) = shared.queue.take(d) {
        let ready = match work {
            Work::Ready(r, slot) => {
                if slot {
                    shared.give_slot();
                }
                *r
            }
            Work::Task(task) => {
                if !shared.start_partition(&task) {
                    shared.queue.finish(lease, false);
                    continue;
                }
                match shared.stages.synthesize(task, Some(ordinal)) {
                    Ok(r) => {
                        shared.stages.queued(&r, Some(ordinal));
                        r
                    }
                    Err(f) => {
                        shared.queue.finish(lease, false);
                        shared.fail(*f);
                        continue;
                    }
                }
            }
        };
        let proved = shared.stages.prove(dev, ordinal, ready);
        shared.queue.finish(lease, proved.outcome.is_ok());
        shared.proved(d, proved);
    }
}

/// Verifies proofs off the device workers, so a device never waits for a
/// pairing check.
pub fn verifier(shared: &Shared, proved: Receiver<Box<Proved>>) {
    while let Ok(p) = proved.recv() {
        let out = shared.stages.verify(*p);
        shared.finish(out);
    }
}

impl Shared {
    /// Every device, in rotation or not, for `/status`.
    pub fn device_states(&self) -> Vec<DeviceState> {
        let mut out: Vec<DeviceState> = self
            .devices
            .iter()
            .map(|d| {
                let error = d.failure();
                DeviceState {
                    backend: d.backend.kind().as_str().to_string(),
                    ordinal: d.backend.device(),
                    name: d.name.clone(),
                    workers: d.workers,
                    busy: d.busy(),
                    partitions_done: d.partitions_done(),
                    in_rotation: error.is_none() && d.workers > 0,
                    error,
                    proving: d.proving(),
                }
            })
            .collect();
        out.extend(self.unavailable.iter().cloned());
        out
    }

    /// Whether any device can still prove.
    pub fn any_device(&self) -> bool {
        self.queue.healthy_devices() > 0
    }
}
