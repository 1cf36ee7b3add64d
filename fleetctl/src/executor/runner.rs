//! What the dispatcher starts for each host: the real host task, or in
//! tests a scripted one.

use super::event::Emitter;
use super::host::{run_host, HostEnd, HostJob};
use super::stop::Stop;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::watch;

pub type HostFuture = Pin<Box<dyn Future<Output = HostEnd> + Send>>;

/// Runs one host's steps; emits through the given [`Emitter`].
pub trait HostRunner: Send + Sync + 'static {
    fn run(&self, job: HostJob, emit: Emitter, stop: watch::Receiver<Stop>) -> HostFuture;
}

/// The real host task: transport, lock, steps, rollback.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealRunner;

impl HostRunner for RealRunner {
    fn run(&self, job: HostJob, emit: Emitter, stop: watch::Receiver<Stop>) -> HostFuture {
        Box::pin(run_host(job, emit, stop))
    }
}
