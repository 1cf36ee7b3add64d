//! The `prover daemon`, `prover client …` and `prover health` subcommands:
//! their arguments, the daemon's logging and signal handling (the only place
//! signals are handled), and the mapping of outcomes to [`exit`] codes.

use super::exit;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use fleet_wire::api::{JobState, SubmitRequest};
use prover::daemon::client::ApiClient;
use prover::daemon::config::{Config, LogFormat};
use prover::daemon::lifecycle;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// The daemon's TOML configuration (see docs/prover.example.toml).
    #[arg(long)]
    pub config: PathBuf,
    /// Check the configuration and the parameter files it preloads, then
    /// exit (0: a daemon would start with them; 1: why not). Starts
    /// nothing and touches no running daemon.
    #[arg(long)]
    pub check_config: bool,
    /// Take over from the daemon running on this configuration: start up
    /// while it still serves, then take its pid file and port as soon as
    /// it has drained, waiting at most this long (e.g. `5m`; at most 1h).
    #[arg(long, value_name = "WAIT", value_parser = parse_handover_wait)]
    pub handover: Option<Duration>,
}

/// The longest `--handover` wait: a successor holds its memory while it waits.
const MAX_HANDOVER_WAIT: Duration = Duration::from_secs(3600);

fn parse_handover_wait(s: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (write e.g. 90s or 5m)"))?;
    if d.is_zero() || d > MAX_HANDOVER_WAIT {
        return Err(format!(
            "`{s}`: the wait must be more than 0 and at most 1h"
        ));
    }
    Ok(d)
}

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Describe the daemon this configuration starts (pid file, API).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    #[command(subcommand)]
    pub command: ClientCommand,
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Submit a job; with --wait, wait for it and print its result.
    Submit(SubmitArgs),
    /// Print the daemon's /status.
    Status(ConfigArg),
    /// Exit 0 if the daemon is ready (/readyz 200), 4 if it answers but is not.
    Ready(ConfigArg),
    #[command(flatten)]
    Filecoin(super::filecoin::ClientFilecoinCommand),
    /// Print a job's status.
    Job(JobArgs),
    /// Cancel a job.
    Cancel(JobArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The daemon's configuration (listen address and token are read from it).
    #[arg(long)]
    pub config: PathBuf,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub common: ConfigArg,
    /// Job id as `submit` printed it.
    #[arg(value_parser = super::checked::Checked(super::checked::job_id))]
    pub job_id: String,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[arg(long)]
    pub config: PathBuf,
    #[arg(long, default_value = "chain")]
    pub circuit: String,
    /// Constraints (65536 or 2^16), 2^4 to 2^27.
    #[arg(long, value_parser = prover::setup::parse_circuit_size)]
    pub size: usize,
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Seed of the public input and witness.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seed of r, s (default: random).
    #[arg(long)]
    pub rs_seed: Option<u64>,
    /// Wait for the result and print it.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

fn load(path: &Path) -> Result<Config> {
    Config::load(path).map_err(anyhow::Error::from)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).context("encoding JSON")?
    );
    Ok(())
}

/// `prover health`: prints the probe; always exits 0 when it could print one.
pub fn run_health(args: HealthArgs) -> Result<u8> {
    let probe = prover::health::probe(args.config.as_deref());
    print_json(&probe)?;
    Ok(exit::OK)
}

/// `prover client …`.
pub fn run_client(args: ClientArgs) -> Result<u8> {
    match args.command {
        ClientCommand::Submit(a) => {
            let config = load(&a.config)?;
            let client = ApiClient::new(&config, Duration::from_secs(30))?;
            let resp = client.submit(&SubmitRequest {
                circuit: a.circuit,
                size: a.size as u64,
                partitions: a.partitions,
                seed: a.seed,
                rs_seed: a.rs_seed,
            })?;
            if !a.wait {
                print_json(&resp)?;
                return Ok(exit::OK);
            }
            let status = client.wait(&resp.job_id, a.timeout)?;
            print_json(&status)?;
            let ok = status.state == JobState::Done
                && status.result.as_ref().is_some_and(|r| r.verified);
            Ok(if ok { exit::OK } else { exit::JOB_FAILED })
        }
        ClientCommand::Filecoin(command) => super::filecoin::run_client(command),
        ClientCommand::Status(a) => {
            let client = ApiClient::new(&load(&a.config)?, a.timeout)?;
            print_json(&client.status()?)?;
            Ok(exit::OK)
        }
        ClientCommand::Ready(a) => {
            let client = ApiClient::new(&load(&a.config)?, a.timeout)?;
            let ready = client.ready()?;
            print_json(&ready)?;
            Ok(if ready.ready {
                exit::OK
            } else {
                exit::NOT_READY
            })
        }
        ClientCommand::Job(a) => {
            let client = ApiClient::new(&load(&a.common.config)?, a.common.timeout)?;
            print_json(&client.job(&a.job_id)?)?;
            Ok(exit::OK)
        }
        ClientCommand::Cancel(a) => {
            let client = ApiClient::new(&load(&a.common.config)?, a.common.timeout)?;
            print_json(&client.cancel(&a.job_id)?)?;
            Ok(exit::OK)
        }
    }
}

/// `prover daemon --config FILE`: loads the config, sets up logging, binds,
/// turns SIGTERM/SIGINT into stop requests and runs [`lifecycle::run`].
pub fn run_daemon(args: DaemonArgs) -> Result<u8> {
    let config = load(&args.config)?;
    if args.check_config {
        return check_config(&args.config, &config);
    }
    init_logging(&config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("prover-rt")
        .build()
        .context("starting the async runtime")?;
    // The pid file's lock before the port: of two racing starts, the loser
    // names the daemon that won instead of failing with `Address already in use`.
    enum How {
        Plain(prover::daemon::pidfile::PidFile),
        Handover(Duration),
    }
    let how = match args.handover {
        Some(wait) => How::Handover(wait),
        None => How::Plain(prover::daemon::pidfile::PidFile::acquire(
            &config.paths.pid_file,
        )?),
    };
    let result = rt.block_on(async {
        let listen = match how {
            How::Plain(pid_file) => lifecycle::Listen::Bound {
                pid_file,
                listener: tokio::net::TcpListener::bind(config.listen)
                    .await
                    .with_context(|| format!("binding the API to {} (listen)", config.listen))?,
            },
            How::Handover(wait) => lifecycle::Listen::Handover { wait },
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("installing the SIGINT handler")?;
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    Some(()) = term.recv() => "SIGTERM",
                    Some(()) = int.recv() => "SIGINT",
                    else => break,
                };
                tracing::info!(signal = name, "stop requested");
                if tx.send(()).is_err() {
                    break;
                }
            }
        });
        Ok::<_, anyhow::Error>(lifecycle::run(config, listen, rx).await)
    });
    // Blocking start-up work (parameter generation) may still run after an
    // early stop; do not wait for it.
    rt.shutdown_timeout(Duration::from_secs(1));
    match result? {
        Ok(()) => Ok(exit::OK),
        // The `exiting` line already carries the reason; nothing may follow it.
        Err(lifecycle::DaemonError::Aborted(_)) => Ok(exit::ABORTED),
        Err(e) => Err(e.into()),
    }
}

/// `prover daemon --check-config`: the config parsed and validated
/// (`load` above); now every preload entry must have a sound parameter
/// file (layout, fit, checksum), or be one the daemon generates
/// (`test_params`).
fn check_config(path: &Path, config: &Config) -> Result<u8> {
    use prover::params::ParamStore;
    // An automatic budget is sized from this host's memory: a margin larger
    // than it must fail here, as the start would.
    if let prover::daemon::config::BudgetSize::Auto = config.memory.budget {
        prover::budget::MemoryBudget::auto(config.memory.safety_margin.0).with_context(|| {
            format!(
                "{}: memory.budget = \"auto\" with memory.safety_margin = {}",
                path.display(),
                prover::daemon::config::format_size(config.memory.safety_margin.0)
            )
        })?;
    }
    // A check writes nothing: a parameter directory that is not there yet
    // is reported (the daemon creates it at start), not created.
    let dir = &config.paths.params_dir;
    let store = if dir.is_dir() {
        Some(ParamStore::open_existing(dir).with_context(|| {
            format!(
                "opening the parameter directory {} (paths.params_dir)",
                dir.display()
            )
        })?)
    } else if dir.exists() {
        anyhow::bail!(
            "{}: paths.params_dir {} is not a directory",
            path.display(),
            dir.display()
        );
    } else {
        println!(
            "paths.params_dir {}: not there yet; created at start",
            dir.display()
        );
        None
    };
    check_param_cache(path, &config.filecoin.param_cache)?;
    let mut problems = Vec::new();
    for (i, p) in config.preload.iter().enumerate() {
        let size = usize::try_from(p.size).context("preload size")?;
        let file = store.as_ref().map(|s| s.params_path(p.circuit, size));
        if !file.as_ref().is_some_and(|f| f.is_file()) && config.test_params {
            println!(
                "preload[{i}] {}/{}: no file yet; generated at start (test_params)",
                p.circuit, p.size
            );
            continue;
        }
        let Some(store) = &store else {
            problems.push(format!(
                "preload[{i}] {}/{}: no parameter file ({} does not exist)",
                p.circuit,
                p.size,
                dir.display()
            ));
            continue;
        };
        match store.verify_any(p.circuit, size) {
            Ok(what) => println!("preload[{i}] {}/{}: ok ({what})", p.circuit, p.size),
            Err(e) => problems.push(format!("preload[{i}] {}/{}: {e}", p.circuit, p.size)),
        }
    }
    if !problems.is_empty() {
        anyhow::bail!(
            "{}: {} preload entr{} unusable:\n{}",
            path.display(),
            problems.len(),
            if problems.len() == 1 { "y" } else { "ies" },
            problems.join("\n")
        );
    }
    println!("{}: ok", path.display());
    Ok(exit::OK)
}

/// `[filecoin] param_cache` for `--check-config`: a folder the config names
/// must be there (the daemon reads it in place and never creates it); the
/// default one may be absent on a host without Filecoin jobs, and is then
/// reported, not failed.
fn check_param_cache(path: &Path, cache: &Path) -> Result<()> {
    let default = Path::new(prover::filecoin::cache::DEFAULT_CACHE_DIR);
    if cache.is_dir() {
        println!("filecoin.param_cache {}: ok", cache.display());
        return Ok(());
    }
    if cache.exists() {
        anyhow::bail!(
            "{}: filecoin.param_cache {} is not a folder",
            path.display(),
            cache.display()
        );
    }
    if cache == default {
        println!(
            "filecoin.param_cache {}: not there (the default); Filecoin jobs are refused (params_missing) until it is",
            cache.display()
        );
        return Ok(());
    }
    anyhow::bail!(
        "{}: filecoin.param_cache {} does not exist: the daemon reads Filecoin's parameters there in place and never creates it (fetch them into it, e.g. `lotus fetch-params <sector size>`, or fix the path)",
        path.display(),
        cache.display()
    )
}

/// Logs to stderr and, unless stderr already is the log file (fleetctl
/// appends the daemon's stderr there), to the log file too: each line lands
/// in the log file exactly once either way.
fn init_logging(config: &Config) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, EnvFilter, Layer};
    let log_file = &config.paths.log_file;
    if let Some(dir) = log_file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .with_context(|| {
            format!(
                "opening the log file {} (paths.log_file)",
                log_file.display()
            )
        })?;
    let stderr_is_file = same_file_as_stderr(&file);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let filter = || quiet_input_faults(EnvFilter::new(config.log.level.as_str()), config.log.level);
    let json = config.log.format == LogFormat::Json;
    let stderr_layer = if json {
        fmt::layer()
            .json()
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .with_filter(filter())
            .boxed()
    } else {
        fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(filter())
            .boxed()
    };
    let file_layer = (!stderr_is_file).then(|| {
        let file = std::sync::Arc::new(file);
        let writer = move || log_writer::FileWriter(file.clone());
        if json {
            fmt::layer()
                .json()
                .with_ansi(false)
                .with_writer(writer)
                .with_filter(filter())
                .boxed()
        } else {
            fmt::layer()
                .with_ansi(false)
                .with_writer(writer)
                .with_filter(filter())
                .boxed()
        }
    });
    tracing_subscriber::registry()
        .with(stderr_layer.with_filter(log_gate::open()))
        .with(file_layer.map(|l| l.with_filter(log_gate::open())))
        .with(log_gate::CloseAfterExiting)
        .try_init()
        .context("installing the logger")?;
    Ok(())
}

/// The proof crates log each fault they find in vanilla PoSt proofs as an
/// ERROR line of their own (`invalid inclusion proof: SectorId(…)`), though
/// it is a client's input, which the daemon already refuses with the cause
/// (400 `bad_filecoin_input`). Those lines stay out of the daemon's log
/// unless it logs at debug or trace level.
fn quiet_input_faults(
    filter: tracing_subscriber::EnvFilter,
    level: prover::daemon::config::LogLevel,
) -> tracing_subscriber::EnvFilter {
    use prover::daemon::config::LogLevel;
    const TARGET: &str = "storage_proofs_post::fallback::vanilla";
    if matches!(level, LogLevel::Debug | LogLevel::Trace) {
        return filter;
    }
    match format!("{TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

fn same_file_as_stderr(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsFd;
    let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let stderr = std::fs::File::from(stderr);
    match (stderr.metadata(), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The log file as a `MakeWriter` target: the formatter writes each line in
/// one `write` to an `O_APPEND` file, so lines never interleave mid-line.
mod log_writer {
    use std::io::Write;
    use std::sync::Arc;

    pub struct FileWriter(pub Arc<std::fs::File>);

    impl Write for FileWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            (&*self.0).write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            (&*self.0).flush()
        }
    }
}

/// Keeps `exiting` the daemon's last log line: after an aborted drain the
/// worker threads are not joined and may still log while the process ends,
/// so the writers close once that line has been written.
mod log_gate {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::filter::{filter_fn, FilterFn};
    use tracing_subscriber::layer::{Context, Layer};

    static CLOSED: AtomicBool = AtomicBool::new(false);

    /// A filter that lets events through until the log closes.
    pub fn open() -> FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
        filter_fn(|_| !CLOSED.load(Ordering::SeqCst))
    }

    /// Closes the log after the lifecycle's `exiting` event; registered
    /// after the writing layers, so that line itself is written.
    pub struct CloseAfterExiting;

    struct IsExiting(bool);

    impl Visit for IsExiting {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "message" && value == "exiting" {
                self.0 = true;
            }
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" && format!("{value:?}") == "exiting" {
                self.0 = true;
            }
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for CloseAfterExiting {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if !event.metadata().target().ends_with("daemon::lifecycle") {
                return;
            }
            let mut v = IsExiting(false);
            event.record(&mut v);
            if v.0 {
                CLOSED.store(true, Ordering::SeqCst);
            }
        }
    }
}
