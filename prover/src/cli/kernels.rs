//! `prover kernels warm`: compiles the backend's kernel units into the
//! on-disk cache a daemon on this host reads, then exits. Nothing talks to
//! a running daemon, and the device is only asked its architecture (no
//! context is created), so a rollout runs it while the old daemon serves.

use super::exit;
use anyhow::{bail, Result};
use prover::backend::cuda::{self, kernels};
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    #[command(subcommand)]
    pub command: KernelsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KernelsCommand {
    /// Compile the kernels for this host's GPU (or --arch) into the kernel cache and exit.
    Warm(WarmArgs),
}

#[derive(Debug, clap::Args)]
pub struct WarmArgs {
    /// Architecture to compile for (`sm_90`); default: that of --device.
    /// Given, it works without a GPU (a build host filling a cache ahead).
    #[arg(long)]
    pub arch: Option<String>,
    /// Device whose architecture is used when --arch is not given.
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// Only these units (by name, comma-separated); default: every unit
    /// the backend loads.
    #[arg(long, value_delimiter = ',')]
    pub unit: Vec<String>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One unit in the report.
#[derive(Debug, Serialize)]
struct UnitReport {
    unit: &'static str,
    /// `compiled`, `disk` or `memory`.
    from: &'static str,
    /// Compile time when compiled now.
    compile_ms: Option<u64>,
    bytes: usize,
    file: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    arch: Option<String>,
    driver: Option<i32>,
    nvrtc: Option<String>,
    cache_dir: Option<String>,
    /// Wall time of the whole compilation (units run side by side).
    wall_ms: u64,
    units: Vec<UnitReport>,
    note: Option<String>,
}

/// Runs `prover kernels …`.
pub fn run(args: KernelsArgs) -> Result<u8> {
    match args.command {
        KernelsCommand::Warm(a) => warm(a),
    }
}

fn warm(a: WarmArgs) -> Result<u8> {
    let driver = cuda::driver_version();
    let arch = match a.arch {
        Some(arch) => Some(arch),
        None => cuda::device_arch(a.device),
    };
    let mut report = Report {
        arch: arch.clone(),
        driver,
        nvrtc: kernels::nvrtc_version().map(|(ma, mi)| format!("{ma}.{mi}")),
        cache_dir: kernels::disk_cache_dir().map(|d| d.display().to_string()),
        wall_ms: 0,
        units: Vec::new(),
        note: None,
    };
    let Some(arch) = arch else {
        // A host without a GPU proves on the CPU backend, which has no
        // kernels: nothing to prepare is not a failure.
        report.note = Some(format!(
            "no CUDA device {} and no --arch: the CPU backend needs no kernels, nothing compiled",
            a.device
        ));
        print(&report, a.json)?;
        return Ok(exit::OK);
    };
    kernels::check_arch(&arch)?;
    if report.cache_dir.is_none() {
        bail!("no kernel cache folder (neither PROVER_KERNEL_CACHE, XDG_CACHE_HOME nor HOME is set): compiled kernels would not be kept");
    }
    let target = kernels::Target { arch, driver };
    let units = select_units(&a.unit)?;
    let t = Instant::now();
    let results = kernels::compile_all(&units, &target);
    report.wall_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(c) => {
                if let Some(f) = c.file.as_ref().filter(|f| !f.is_file()) {
                    errors.push(format!(
                        "kernel unit {}: compiled but not written to {} (disk full or not writable? see the warning above)",
                        c.unit,
                        f.display()
                    ));
                }
                let (from, compile_ms) = match c.origin {
                    kernels::Origin::Compiled { ms } => ("compiled", Some(ms)),
                    kernels::Origin::Disk => ("disk", None),
                    kernels::Origin::Memory => ("memory", None),
                };
                report.units.push(UnitReport {
                    unit: c.unit,
                    from,
                    compile_ms,
                    bytes: c.cubin.len(),
                    file: c.file.map(|f| f.display().to_string()),
                });
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    print(&report, a.json)?;
    Ok(exit::OK)
}

/// The backend's units, or those of them named by `--unit`.
fn select_units(names: &[String]) -> Result<Vec<&'static kernels::KernelUnit>> {
    let all = &kernels::BACKEND_UNITS;
    if names.is_empty() {
        return Ok(all.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            all.iter().find(|u| u.name == n).ok_or_else(|| {
                anyhow::anyhow!(
                    "no kernel unit {n:?}; the units are {}",
                    all.iter().map(|u| u.name).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

fn print(r: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    if let Some(note) = &r.note {
        println!("{note}");
        return Ok(());
    }
    println!(
        "kernels for {} (driver {}, nvrtc {}) in {}: {:.1} s",
        r.arch.as_deref().unwrap_or("?"),
        r.driver.map_or("none".into(), |v| v.to_string()),
        r.nvrtc.as_deref().unwrap_or("?"),
        r.cache_dir.as_deref().unwrap_or("?"),
        r.wall_ms as f64 / 1e3
    );
    println!(
        "{:<20} {:<9} {:>10} {:>10}",
        "unit", "from", "compile_s", "bytes"
    );
    for u in &r.units {
        println!(
            "{:<20} {:<9} {:>10} {:>10}",
            u.unit,
            u.from,
            u.compile_ms
                .map_or("-".into(), |ms| format!("{:.1}", ms as f64 / 1e3)),
            u.bytes
        );
    }
    Ok(())
}
