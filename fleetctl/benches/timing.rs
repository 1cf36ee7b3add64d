//! `cargo bench -p fleetctl --bench timing [-- HOSTS RECORDS]`: collect and
//! report throughput on a lab fleet (root) with HOSTS hosts × RECORDS timing
//! lines each (defaults 16 × 1,000,000), printed as a table.
//!
//! Each host gets a realistic mix written by the real record types: per
//! partition one `partition` record and six TIMELINE events, one `proof`
//! record per four partitions, spread over a rotated and an active file.

use fleet_wire::timing::{
    JobTag, PartitionRecord, Phase, ProofRecord, TimelineEvent, TimelineKind, TimingLine,
    TIMING_SCHEMA_VERSION,
};
use fleetctl::inventory::Host;
use fleetctl::lab::{Lab, LabConfig};
use fleetctl::timing::{collect, report, scan, store::Store};
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

/// Writes at least `records` lines; returns (bytes, lines).
fn write_host_log(path: &Path, host: &str, records: u64) -> std::io::Result<(u64, u64)> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut n = 0u64;
    let mut ts = 1_700_000_000_000_000u64;
    let mut job = 0u64;
    let mut written = 0u64;
    let build = if host.ends_with('0') {
        "old0001"
    } else {
        "new0002"
    };
    while n < records {
        job += 1;
        for part in 0..4u32 {
            let tag = JobTag {
                host: host.into(),
                build: build.into(),
                job_id: format!("job-{job}"),
                circuit: "sha256".into(),
                size: 1 << 20,
            };
            let synth = 900.0 + (job % 37) as f64 * 3.0;
            let mut phases = BTreeMap::new();
            for (p, ms) in [
                (Phase::QueueWait, 1.5),
                (Phase::BudgetWait, 0.2),
                (Phase::PoolCheckout, 0.05),
                (Phase::Synthesis, synth),
                (Phase::GpuLockWait, 3.0),
                (Phase::H2d, 2.0 + (job % 5) as f64 * 0.1),
                (Phase::NttKernels, 28.0),
                (Phase::Msm, 610.0 + (job % 11) as f64),
                (Phase::Assembly, 0.4),
                (Phase::Total, synth + 650.0),
            ] {
                phases.insert(p, ms);
            }
            for (kind, dt) in [
                (TimelineKind::SynthesisStart, 0),
                (TimelineKind::SynthesisEnd, 900_000),
                (TimelineKind::GpuQueue, 900_010),
                (TimelineKind::GpuPickup, 900_020),
                (TimelineKind::GpuStart, 903_000),
                (TimelineKind::GpuEnd, 1_543_000),
            ] {
                let e = TimingLine::Timeline(TimelineEvent {
                    priority: None,
                    v: TIMING_SCHEMA_VERSION,
                    ts_us: ts + dt,
                    host: host.into(),
                    build: build.into(),
                    job_id: tag.job_id.clone(),
                    partition: part,
                    event: kind,
                    device: Some(part % 2),
                });
                written += w.write(e.to_line().as_bytes())? as u64 + w.write(b"\n")? as u64;
                n += 1;
            }
            let rec = TimingLine::Partition(PartitionRecord {
                v: TIMING_SCHEMA_VERSION,
                ts_ms: (ts + 1_543_000) / 1000,
                tag: tag.clone(),
                partition: part,
                partitions: 4,
                domain: 1 << 20,
                backend: "cuda".into(),
                device: Some(part % 2),
                pinned: true,
                h2d_bytes: 100_663_296,
                h2d_ms: None,
                h2d_gbps: Some(50.0),
                phases_ms: phases,
                phase_split_ms: Default::default(),
                device_busy_ms: Some(420.0),
                error: None,
            });
            written += w.write(rec.to_line().as_bytes())? as u64 + w.write(b"\n")? as u64;
            n += 1;
            ts += 700_000;
            if part == 3 {
                let p = TimingLine::Proof(ProofRecord {
                    v: TIMING_SCHEMA_VERSION,
                    ts_ms: ts / 1000,
                    tag,
                    partitions: 4,
                    backend: "cuda".into(),
                    verified: Some(true),
                    total_ms: 4000.0,
                    error: None,
                });
                written += w.write(p.to_line().as_bytes())? as u64 + w.write(b"\n")? as u64;
                n += 1;
            }
        }
    }
    w.flush()?;
    Ok((written, n))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let hosts: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(16);
    let records: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    if unsafe { libc::geteuid() } != 0 {
        println!("timing bench: needs root for the lab fleet; skipped");
        return Ok(());
    }
    let mut cfg = LabConfig::new(hosts);
    cfg.data_size = records * 400 + (64 << 20);
    let lab = Lab::start_with(cfg)?;
    let scratch = tempfile::tempdir_in("/var/tmp")?;
    // Write each host's log locally, then move it into the host's /data
    // (its own mount namespace) as a rotated file plus an active one.
    let t0 = Instant::now();
    let (mut bytes, mut lines) = (0u64, 0u64);
    for (i, h) in lab.hosts().iter().enumerate() {
        let local = scratch.path().join(format!("{}.jsonl", h.name));
        let (b, n) = write_host_log(&local, &h.name, records)?;
        bytes += b;
        lines += n;
        let l = local.display().to_string();
        let script = format!(
            "mkdir -p /data/prover/logs && head -n {half} {l} > /data/prover/logs/timing.jsonl.1 && tail -n +{next} {l} > /data/prover/logs/timing.jsonl",
            half = records / 2,
            next = records / 2 + 1
        );
        let out = lab.exec(i, &["sh", "-c", &script])?;
        anyhow::ensure!(
            out.status.success(),
            "seeding {}: {}",
            h.name,
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::remove_file(&local)?;
    }
    let gen_s = t0.elapsed().as_secs_f64();
    let inv = fleetctl::inventory::load(Some(&lab.inventory_path()), &[])?;
    let hosts_v: Vec<Host> = inv.hosts.iter().map(|h| h.host.clone()).collect();
    let store_dir = scratch.path().join("store");
    let store = Store::new(&store_dir);
    let rt = tokio::runtime::Runtime::new()?;
    let t1 = Instant::now();
    let summary = rt.block_on(collect::collect_all(
        &hosts_v,
        &store,
        std::time::Duration::from_secs(1800),
        64,
        collect::CHUNK,
    ));
    let collect_s = t1.elapsed().as_secs_f64();
    for s in &summary {
        anyhow::ensure!(s.error.is_none(), "collect {}: {:?}", s.host, s.error);
    }
    let fetched: u64 = summary.iter().map(|s| s.new_bytes).sum();
    let t2 = Instant::now();
    let again = rt.block_on(collect::collect_all(
        &hosts_v,
        &store,
        std::time::Duration::from_secs(600),
        64,
        collect::CHUNK,
    ));
    let recollect_s = t2.elapsed().as_secs_f64();
    let refetched: u64 = again.iter().map(|s| s.new_bytes).sum();
    let t3 = Instant::now();
    let sources = scan::store_sources(&store)?;
    let s = scan::scan(&sources)?;
    let r = report::build(&s, &report::Thresholds::default(), Some("old0001"));
    let report_s = t3.elapsed().as_secs_f64();
    let total_records = lines;
    anyhow::ensure!(
        s.lines == lines,
        "scanned {} lines, expected {lines}",
        s.lines
    );
    println!("| step | hosts x records | bytes | seconds | records/s | MB/s |");
    println!("|---|---|---|---|---|---|");
    println!("| generate (not timed work) | {hosts} x {records} | {bytes} | {gen_s:.1} | - | - |");
    for (name, secs, b) in [
        ("collect (first)", collect_s, fetched),
        ("report", report_s, s.bytes),
    ] {
        println!(
            "| {name} | {hosts} x {records} | {b} | {secs:.2} | {:.0} | {:.1} |",
            total_records as f64 / secs,
            b as f64 / 1e6 / secs
        );
    }
    println!("| collect (again, nothing new) | {hosts} x {records} | {refetched} | {recollect_s:.2} | - | - |");
    println!(
        "flags: {}, hosts in report: {}",
        r.flags.len(),
        r.hosts.len()
    );
    drop(lab);
    Ok(())
}
