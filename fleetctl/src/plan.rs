//! What a run would do on which host, in which batch, without changing
//! anything (`fleetctl plan`, and the preamble of `run --check`).

use crate::executor::Prepared;
use crate::inventory::{Host, TransportKind};
use crate::playbook::BatchSize;
use crate::steps::{self, Release, StepCtx};
use crate::transport::{LocalTransport, Transport};

fn target(h: &Host) -> String {
    match h.transport {
        TransportKind::Local => "local".to_string(),
        TransportKind::Ssh => match &h.jump_host {
            Some(j) => format!("ssh {}@{}:{} via {j}", h.user, h.address, h.port),
            None => format!("ssh {}@{}:{}", h.user, h.address, h.port),
        },
    }
}

/// The plan as text: strategy, then each batch, each host and each step.
pub fn render(p: &Prepared) -> String {
    let pb = &p.playbook;
    let s = &pb.strategy;
    let batches = s.batches(&p.hosts);
    let mut out = format!(
        "plan: playbook `{}` ({}) on {} host(s) from {}\n",
        pb.name,
        pb.source,
        p.hosts.len(),
        p.inventory
    );
    match &p.release.sha256 {
        Some(sha) => out.push_str(&format!(
            "release: binary sha256 {} ({}); a host's release id also covers the config shipped to it\n",
            sha,
            p.release.binary.display()
        )),
        None => out.push_str("release: each host's current release (nothing is uploaded)\n"),
    }
    out.push_str(&format!(
        "strategy: canary {}, batch {}, max_fail {}, {}\n",
        s.canary,
        match s.batch {
            BatchSize::Count(n) => n.to_string(),
            BatchSize::Percent(pc) => format!("{pc}% (= {} host(s))", s.batch_len(p.hosts.len())),
        },
        s.max_fail,
        if s.rollback_on_failure {
            "a host that fails after drain/start is rolled back"
        } else {
            "no automatic rollback"
        }
    ));
    if let Some(gap) = s.max_serving_gap {
        out.push_str(&format!(
            "serving gap budget: {} per host (drain start to the new daemon ready); longer fails the host and rolls it back\n",
            humantime::format_duration(gap)
        ));
    }
    let staged = pb.stage_len();
    if let Some(n) = s.stage.filter(|_| staged > 0 && staged < pb.steps.len()) {
        let names: Vec<&str> = pb.steps[..staged].iter().map(|st| st.name()).collect();
        out.push_str(&format!(
            "staging: {} on every host first, {n} at a time, while the old daemons serve; the batches then run only steps {}..{}\n",
            names.join(" + "),
            staged + 1,
            pb.steps.len()
        ));
    }
    for (bi, batch) in batches.iter().enumerate() {
        let names: Vec<&str> = batch.iter().map(|&i| p.hosts[i].name.as_str()).collect();
        out.push_str(&format!(
            "\nbatch {}/{}{}: {}\n",
            bi + 1,
            batches.len(),
            if bi == 0 && s.canary > 0 {
                " (canary)"
            } else {
                ""
            },
            names.join(", ")
        ));
        for &i in batch {
            let host = &p.hosts[i];
            out.push_str(&format!(
                "  {} ({}, install_dir {})\n",
                host.name,
                target(host),
                host.install_dir
            ));
            // `describe` only formats; it never touches the transport, so a
            // local handle stands in for the connection the run would open.
            let transport = Transport::Local(LocalTransport::new(&host.name));
            // Hashing the host's config is reading a file, not the host;
            // one that cannot be read shows as the binary's id here, and
            // fails that host's run.
            let release = match &p.release.sha256 {
                Some(sha) if pb.uploads() => Release::shipped(
                    &p.release.binary,
                    sha.clone(),
                    host.config_file.as_deref(),
                    p.release.compressed.clone(),
                )
                .unwrap_or_else(|_| Release::on_host(sha.clone(), host.config_file.clone())),
                Some(id) => Release::on_host(id.clone(), host.config_file.clone()),
                None => Release::on_host("<current>".into(), host.config_file.clone()),
            };
            let ctx = StepCtx::new(host, &transport, &release);
            for (n, spec) in pb.steps.iter().enumerate() {
                out.push_str(&format!(
                    "    {}. {}: {}\n",
                    n + 1,
                    spec.name(),
                    steps::describe(spec, &ctx)
                ));
            }
        }
    }
    if s.max_fail + 1 < p.hosts.len() {
        out.push_str(&format!(
            "\nthe run halts after the batch in which host failure number {} happens; later hosts are not started\n",
            s.max_fail + 1
        ));
    }
    out
}
