//! The load of the experiment window, on one host: submit jobs through the
//! host's own daemon (`prover client submit --wait`, over the run's
//! transport) with a fixed number in flight, or only wait while real
//! traffic runs. The window is read from the host's own clock on both
//! ends, so the records it wrote fall inside it whatever this machine's
//! clock says.

use super::analysis::HostWindow;
use super::definition::{Amount, Submit};
use crate::executor::Stop;
use crate::inventory::Host;
use crate::steps::remote::QUICK;
use crate::steps::Layout;
use crate::transport::quote::quote;
use crate::transport::{QuoteError, Transport, TransportError};
use fleet_wire::api::{JobState, JobStatus, Status};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("{host}: {source}")]
    Transport {
        host: String,
        #[source]
        source: TransportError,
    },
    #[error("{host}: {source}")]
    Quote {
        host: String,
        #[source]
        source: QuoteError,
    },
    #[error("{host}: {what}: {detail}")]
    Answer {
        host: String,
        what: &'static str,
        detail: String,
    },
}

/// What one host did in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    pub window: HostWindow,
    /// Jobs submitted that finished verified.
    pub ok: u32,
    /// Jobs that failed, did not verify, or could not be submitted.
    pub failed: u32,
    /// The first few failures, for the report.
    pub errors: Vec<String>,
    /// Whether Ctrl-C cut the load short.
    pub interrupted: bool,
}

/// Failures kept per host for the report.
const ERRORS_KEPT: usize = 5;

struct Cmd {
    bin: String,
    config: String,
    install: String,
}

impl Cmd {
    fn new(host: &Host) -> Result<Cmd, QuoteError> {
        let layout = Layout::new(host);
        Ok(Cmd {
            bin: quote(&layout.current_binary())?,
            config: quote(&layout.config)?,
            install: quote(&layout.install)?,
        })
    }

    /// `prover client ARGS` from the install dir (the config's relative
    /// paths resolve there, as the daemon's do).
    fn client(&self, args: &str) -> String {
        format!(
            "cd {} && exec {} client {args} --config {}",
            self.install, self.bin, self.config
        )
    }
}

fn transport_err(host: &str) -> impl FnOnce(TransportError) -> WorkloadError + '_ {
    move |source| WorkloadError::Transport {
        host: host.to_owned(),
        source,
    }
}

/// The host's clock, Unix milliseconds.
pub async fn host_clock_ms(t: &Transport, host: &str) -> Result<u64, WorkloadError> {
    let out = t
        .run_script_ok("date +%s%3N", QUICK)
        .await
        .map_err(transport_err(host))?;
    let text = out.stdout_text();
    text.trim()
        .parse::<u64>()
        .map_err(|_| WorkloadError::Answer {
            host: host.to_owned(),
            what: "`date +%s%3N`",
            detail: format!("{text:?} is not a number of milliseconds"),
        })
}

/// The daemon's `/status` (its build is what the records must carry).
pub async fn daemon_status(t: &Transport, host: &Host) -> Result<Status, WorkloadError> {
    let quote_err = |source| WorkloadError::Quote {
        host: host.name.clone(),
        source,
    };
    let cmd = Cmd::new(host).map_err(quote_err)?;
    let out = t
        .run_script_ok(&cmd.client("status"), QUICK)
        .await
        .map_err(transport_err(&host.name))?;
    serde_json::from_slice(&out.stdout).map_err(|e| WorkloadError::Answer {
        host: host.name.clone(),
        what: "`prover client status`",
        detail: e.to_string(),
    })
}

/// One job, submitted and waited for; its id when the daemon accepted it.
async fn one_job(
    t: &Transport,
    host: &str,
    cmd: &Cmd,
    s: &Submit,
    seed: u64,
) -> (Option<String>, Result<(), String>) {
    let args = match quote(&s.circuit) {
        Ok(circuit) => format!(
            "submit --circuit {circuit} --size {} --partitions {} --seed {seed} --wait --timeout {}ms",
            s.size,
            s.partitions,
            s.timeout.as_millis()
        ),
        Err(e) => return (None, Err(e.to_string())),
    };
    // The client's own wait ends at the job timeout; the command gets a
    // little more for the round trips around it.
    let out = match t
        .run_script(&cmd.client(&args), s.timeout + Duration::from_secs(30))
        .await
    {
        Ok(out) => out,
        Err(e) => return (None, Err(format!("{host}: {e}"))),
    };
    match serde_json::from_slice::<JobStatus>(&out.stdout) {
        Ok(st) => {
            let verified = st.result.as_ref().is_some_and(|r| r.verified);
            let result = if st.state == JobState::Done && verified {
                Ok(())
            } else {
                Err(format!(
                    "job {} ended {:?}{}",
                    st.job_id,
                    st.state,
                    st.error.map(|e| format!(": {e}")).unwrap_or_default()
                ))
            };
            (Some(st.job_id), result)
        }
        Err(_) => (
            None,
            Err(format!(
                "submit exited {:?}: {}",
                out.status,
                out.stderr_text().lines().last().unwrap_or("")
            )),
        ),
    }
}

/// Submits the definition's jobs to one host, `concurrency` at a time,
/// until the job count or the duration is reached or Ctrl-C stops it
/// (jobs in flight finish; a second Ctrl-C abandons them).
/// Jobs finished so far, across every host of a measurement, for its
/// progress lines.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
}

pub async fn drive(
    t: Arc<Transport>,
    host: &Host,
    build: Option<String>,
    s: &Submit,
    stop: watch::Receiver<Stop>,
    tally: Arc<Tally>,
) -> Result<HostLoad, WorkloadError> {
    let cmd = Arc::new(Cmd::new(host).map_err(|source| WorkloadError::Quote {
        host: host.name.clone(),
        source,
    })?);
    let start_ms = host_clock_ms(&t, &host.name).await?;
    let begin = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..s.concurrency {
        let (t, cmd, next, s, name, tally) = (
            t.clone(),
            cmd.clone(),
            next.clone(),
            s.clone(),
            host.name.clone(),
            tally.clone(),
        );
        let mut stop = stop.clone();
        workers.spawn(async move {
            let mut done: Vec<(Option<String>, Result<(), String>)> = Vec::new();
            let mut interrupted = false;
            loop {
                if *stop.borrow() != Stop::Run {
                    interrupted = true;
                    break;
                }
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let more = match s.amount {
                    Amount::Jobs(n) => seed < u64::from(n),
                    Amount::Duration(d) => begin.elapsed() < d,
                };
                if !more {
                    break;
                }
                tokio::select! {
                    r = one_job(&t, &name, &cmd, &s, seed) => {
                        let count = if r.1.is_ok() { &tally.ok } else { &tally.failed };
                        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        done.push(r);
                    }
                    _ = stop.wait_for(|s| *s == Stop::Abort) => {
                        interrupted = true;
                        break;
                    }
                }
            }
            (done, interrupted)
        });
    }
    let mut jobs = BTreeSet::new();
    let mut load = HostLoad {
        window: HostWindow {
            host: host.name.clone(),
            start_ms,
            end_ms: start_ms,
            build,
            jobs: None,
            unsubmitted_failures: 0,
        },
        ok: 0,
        failed: 0,
        errors: Vec::new(),
        interrupted: false,
    };
    while let Some(r) = workers.join_next().await {
        let Ok((done, interrupted)) = r else {
            load.failed += 1;
            load.window.unsubmitted_failures += 1;
            continue;
        };
        load.interrupted |= interrupted;
        for (id, result) in done {
            if let Some(id) = &id {
                jobs.insert(id.clone());
            }
            let accepted = id.is_some();
            match result {
                Ok(()) => load.ok += 1,
                Err(e) => {
                    load.failed += 1;
                    if !accepted {
                        load.window.unsubmitted_failures += 1;
                    }
                    if load.errors.len() < ERRORS_KEPT {
                        load.errors.push(e);
                    }
                }
            }
        }
    }
    load.window.end_ms = host_clock_ms(&t, &host.name).await?;
    load.window.jobs = Some(jobs);
    Ok(load)
}

/// Waits `duration` (or until Ctrl-C) while the host serves its own traffic.
pub async fn observe(
    t: &Transport,
    host: &Host,
    build: Option<String>,
    duration: Duration,
    mut stop: watch::Receiver<Stop>,
) -> Result<HostLoad, WorkloadError> {
    let start_ms = host_clock_ms(t, &host.name).await?;
    let interrupted = tokio::select! {
        () = tokio::time::sleep(duration) => false,
        _ = stop.wait_for(|s| *s != Stop::Run) => true,
    };
    let end_ms = host_clock_ms(t, &host.name).await?;
    Ok(HostLoad {
        window: HostWindow {
            host: host.name.clone(),
            start_ms,
            end_ms,
            build,
            jobs: None,
            unsubmitted_failures: 0,
        },
        ok: 0,
        failed: 0,
        errors: Vec::new(),
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn observing_reads_the_window_from_the_host_clock_and_stops_on_ctrl_c() {
        let host = Host::local("h", "/tmp");
        let t = Transport::connect(&host).await.unwrap();
        let (tx, rx) = watch::channel(Stop::Run);
        let l = observe(
            &t,
            &host,
            Some("b".into()),
            Duration::from_millis(200),
            rx.clone(),
        )
        .await
        .unwrap();
        assert!(l.window.end_ms >= l.window.start_ms + 200, "{l:?}");
        assert_eq!(
            (l.window.build.as_deref(), l.interrupted),
            (Some("b"), false)
        );
        tx.send(Stop::Finish).unwrap();
        let begin = Instant::now();
        let l = observe(&t, &host, None, Duration::from_secs(60), rx)
            .await
            .unwrap();
        assert!(
            l.interrupted && begin.elapsed() < Duration::from_secs(10),
            "{l:?}"
        );
    }

    #[test]
    fn client_commands_quote_every_path() {
        let host = Host::local("h", "/opt/my prover");
        let c = Cmd::new(&host).unwrap();
        assert_eq!(
            c.client("status"),
            "cd '/opt/my prover' && exec '/opt/my prover/current/prover' client status --config '/opt/my prover/current/prover.toml'"
        );
    }
}
