//! `fleetctl timing collect|report|export`: clap types and run functions.

use super::args::{deadline_arg, TargetArgs};
use super::exit;
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use fleetctl::timing::report::{build, Thresholds};
use fleetctl::timing::scan::{file_sources, scan, store_sources};
use fleetctl::timing::store::Store;
use fleetctl::timing::{collect, export, render};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, Subcommand)]
pub enum TimingCommand {
    /// Fetch new timing records from every selected host into the local store.
    Collect(CollectArgs),
    /// Statistics per host, build and phase; outliers; build comparison.
    Report(ReportArgs),
    /// Write node_exporter textfile-collector files.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct CollectArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Local store (one folder per host).
    #[arg(long, default_value = ".fleetctl/timing")]
    pub store: PathBuf,
    /// Per-host deadline; what was fetched before it is kept.
    #[arg(long, default_value = "120s", value_parser = deadline_arg)]
    pub deadline: Duration,
    /// Hosts collected at once (1 to 1024).
    #[arg(long, default_value_t = 64,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub parallel: usize,
    /// Bytes fetched per remote command (bounds memory per host; 4096 to
    /// 268435456).
    #[arg(long, default_value_t = collect::CHUNK,
          value_parser = clap::value_parser!(u64).range(collect::CHUNK_BYTES))]
    pub chunk_bytes: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Html,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Local store to read (ignored when files are given).
    #[arg(long, default_value = ".fleetctl/timing")]
    pub store: PathBuf,
    /// Timing files to read instead of the store (host = parent folder name).
    pub files: Vec<PathBuf>,
    /// Compare every other build against this one.
    #[arg(long)]
    pub baseline: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write the output here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Flag hosts uploading slower than this (GB/s, 0 to 10000).
    #[arg(long, default_value_t = 20.0, value_parser = gbps_arg)]
    pub min_h2d_gbps: f64,
    /// Flag devices whose kernel busy fraction (device time measured on the
    /// device over the wall window) is under this (0 to 1).
    #[arg(long, default_value_t = 0.50, value_parser = fraction_arg)]
    pub min_busy: f64,
    /// Flag devices occupied (a partition held the device worker) less than
    /// this fraction of the window (0 to 1).
    #[arg(long, default_value_t = 0.70, value_parser = fraction_arg)]
    pub min_occupied: f64,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[arg(long, default_value = ".fleetctl/timing")]
    pub store: PathBuf,
    /// node_exporter textfile-collector directory.
    #[arg(long, value_name = "DIR")]
    pub prometheus: PathBuf,
}

/// A number within `range`: NaN and infinities are not numbers here.
fn bounded_f64(value: &str, range: std::ops::RangeInclusive<f64>) -> Result<f64, String> {
    let x: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if !range.contains(&x) {
        return Err(format!(
            "must be from {} to {}, not {value}",
            range.start(),
            range.end()
        ));
    }
    Ok(x)
}

fn fraction_arg(value: &str) -> Result<f64, String> {
    bounded_f64(value, 0.0..=1.0)
}

/// No host link moves 10 TB/s; above, the threshold is a typo.
fn gbps_arg(value: &str) -> Result<f64, String> {
    bounded_f64(value, 0.0..=10_000.0)
}

pub async fn run(cmd: TimingCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TimingCommand::Collect(a) => collect_cmd(a).await,
        TimingCommand::Report(a) => report_cmd(a),
        TimingCommand::Export(a) => export_cmd(a),
    }
}

async fn collect_cmd(a: CollectArgs) -> anyhow::Result<ExitCode> {
    let (_, hosts) = fleetctl::inventory::load_selected(&a.target.clone().into())?;
    let store = Store::new(&a.store);
    let started = Instant::now();
    let summary = collect::collect_all(&hosts, &store, a.deadline, a.parallel, a.chunk_bytes).await;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "host",
        "files",
        "new bytes",
        "time",
        "left out",
        "result",
    ]);
    let mut failed = 0;
    let mut total = 0;
    for s in &summary {
        total += s.new_bytes;
        if s.error.is_some() {
            failed += 1;
        }
        t.add_row(vec![
            s.host.clone(),
            s.files.to_string(),
            s.new_bytes.to_string(),
            format!("{} ms", s.elapsed_ms),
            s.skipped.to_string(),
            s.error.clone().unwrap_or_else(|| "ok".into()),
        ]);
    }
    println!("{t}");
    // Where every line left out was, so it can be looked at on the host.
    for s in summary.iter().filter(|s| s.skipped > 0) {
        println!(
            "{}: left out {} line(s) (too long, or not a timing record):",
            s.host, s.skipped
        );
        for l in collect::skipped_text(s.skipped, &s.skipped_lines).lines() {
            println!("  {l}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "collected {total} new bytes from {} hosts in {secs:.2} s ({:.1} MB/s) into {}",
        summary.len() - failed,
        total as f64 / 1e6 / secs.max(1e-9),
        a.store.display()
    );
    Ok(exit::code(exit::hosts(failed == 0)))
}

fn report_cmd(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let store = Store::new(&a.store);
    let sources = if a.files.is_empty() {
        store_sources(&store)?
    } else {
        file_sources(&a.files)
    };
    anyhow::ensure!(
        !sources.is_empty(),
        "no timing files in {}: run `fleetctl timing collect` first, or pass files",
        a.store.display()
    );
    let started = Instant::now();
    let mut s = scan(&sources)?;
    if a.files.is_empty() {
        // What collect left out is a note beside the report: a state file
        // that cannot be read costs the note, never the report.
        match store.skipped() {
            Ok((count, lines)) => s.add_collect_skipped(count, lines),
            Err(e) => eprintln!("warning: lines left out at collect not listed: {e}"),
        }
    }
    let thresholds = Thresholds {
        min_h2d_gbps: a.min_h2d_gbps,
        min_busy: a.min_busy,
        min_occupied: a.min_occupied,
        ..Thresholds::default()
    };
    let r = build(&s, &thresholds, a.baseline.as_deref());
    if let Some(b) = &a.baseline {
        anyhow::ensure!(
            r.builds.iter().any(|x| &x.build == b),
            "--baseline {b}: no records of that build (builds: {})",
            r.builds
                .iter()
                .map(|x| x.build.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let text = match a.format {
        Format::Table => render::table(&r),
        Format::Json => serde_json::to_string_pretty(&r)?,
        Format::Html => render::html(&r, a.min_h2d_gbps),
    };
    match &a.out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => println!("{text}"),
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "read {} lines ({:.1} MB) from {} files in {secs:.2} s: {:.0} records/s, {:.1} MB/s",
        s.lines,
        s.bytes as f64 / 1e6,
        sources.len(),
        s.lines as f64 / secs.max(1e-9),
        s.bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(exit::code(exit::EXIT_OK))
}

fn export_cmd(a: ExportArgs) -> anyhow::Result<ExitCode> {
    let sources = store_sources(&Store::new(&a.store))?;
    let s = scan(&sources)?;
    let files = export::write_dir(&a.prometheus, &s)?;
    for f in &files {
        println!("wrote {}", f.display());
    }
    Ok(exit::code(exit::EXIT_OK))
}
