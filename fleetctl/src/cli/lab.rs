//! `fleetctl lab up|down|list`: a lab fleet by hand, for demos and debugging.

use anyhow::{bail, Context};
use fleetctl::lab::{destroy_lab, list_labs, reap_stale, require_root, Lab, LabConfig};
use fleetctl::lab::{DEFAULT_BASE_DIR, DEFAULT_DATA_SIZE};
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Start a lab and leave it running; prints its inventory and ssh_config paths.
    Up {
        /// Number of hosts (h01, h02, ...; h01 is tagged canary).
        #[arg(long, default_value_t = 8)]
        hosts: usize,
        /// Parent directory of the lab's directory (not under /tmp or /data).
        #[arg(long, value_name = "DIR", default_value = DEFAULT_BASE_DIR)]
        dir: PathBuf,
        /// Size of each host's /data tmpfs, in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_DATA_SIZE)]
        data_size: u64,
        /// Keep the lab only while this command runs: it is torn down when
        /// a line or end of input arrives on stdin.
        #[arg(long)]
        hold: bool,
    },
    /// Tear a lab down (the only one left running by `up`, or --id, or --all).
    Down {
        /// The lab's id (the name of its directory).
        #[arg(long, conflicts_with = "all")]
        id: Option<String>,
        /// Every lab left running by `up`, and every stale one.
        #[arg(long)]
        all: bool,
        /// With --all: also labs owned by running processes (test runs).
        #[arg(long, requires = "all")]
        force: bool,
        /// Parent directory the labs were started in.
        #[arg(long, value_name = "DIR", default_value = DEFAULT_BASE_DIR)]
        dir: PathBuf,
    },
    /// List the labs under a directory.
    List {
        #[arg(long, value_name = "DIR", default_value = DEFAULT_BASE_DIR)]
        dir: PathBuf,
    },
}

pub fn run(cmd: LabCommand) -> anyhow::Result<()> {
    match cmd {
        LabCommand::Up {
            hosts,
            dir,
            data_size,
            hold,
        } => up(hosts, dir, data_size, hold),
        LabCommand::Down {
            id,
            all,
            force,
            dir,
        } => down(id, all, force, &dir),
        LabCommand::List { dir } => {
            list(&dir);
            Ok(())
        }
    }
}

fn root() -> anyhow::Result<()> {
    require_root()
        .context("`fleetctl lab` creates namespaces, links and sshd processes: run it as root")
}

fn up(hosts: usize, dir: PathBuf, data_size: u64, hold: bool) -> anyhow::Result<()> {
    root()?;
    let config = LabConfig {
        base_dir: dir,
        data_size,
        ..LabConfig::new(hosts)
    };
    let lab = Lab::start_with(config).context("starting the lab")?;
    let (net, prefix) = lab.subnet();
    println!(
        "lab {}: {} hosts on {net}/{prefix}",
        lab.id(),
        lab.hosts().len()
    );
    for host in lab.hosts() {
        println!("  {} {}", host.name, host.address);
    }
    println!("  dir:        {}", lab.dir().display());
    println!("  inventory:  {}", lab.inventory_path().display());
    println!("  ssh_config: {}", lab.ssh_config_path().display());
    println!(
        "  try:        ssh -F {} h01",
        lab.ssh_config_path().display()
    );
    if hold {
        println!("  holding: press Enter (or end input) to tear it down");
        let mut line = String::new();
        // Any outcome of the read (line, EOF, error) means: done.
        let _ = std::io::stdin().lock().read_line(&mut line);
        lab.teardown().context("tearing the lab down")?;
        println!("lab torn down");
    } else {
        let id = lab.id().to_string();
        lab.detach().context("detaching the lab")?;
        println!("  down:       fleetctl lab down --id {id}");
    }
    Ok(())
}

fn down(id: Option<String>, all: bool, force: bool, base: &Path) -> anyhow::Result<()> {
    root()?;
    for problem in reap_stale(base) {
        eprintln!("warning: {problem}");
    }
    if let Some(id) = id {
        destroy_lab(base, &id).with_context(|| format!("tearing down lab {id}"))?;
        println!("lab {id} torn down");
        return Ok(());
    }
    let labs = list_labs(base);
    let chosen: Vec<_> = labs
        .iter()
        .filter(|l| l.owner_alive.is_none() || (force && l.owner_alive == Some(true)))
        .collect();
    if !all && chosen.len() > 1 {
        let ids: Vec<&str> = chosen.iter().map(|l| l.id.as_str()).collect();
        bail!(
            "{} labs are running ({}): pick one with --id or use --all",
            ids.len(),
            ids.join(", ")
        );
    }
    if chosen.is_empty() {
        println!("no lab to tear down under {}", base.display());
        return Ok(());
    }
    let mut failed = Vec::new();
    for lab in chosen {
        match destroy_lab(base, &lab.id) {
            Ok(()) => println!("lab {} torn down", lab.id),
            Err(e) => {
                eprintln!("error: lab {}: {e}", lab.id);
                failed.push(lab.id.clone());
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("teardown incomplete for {}", failed.join(", "))
    }
}

fn list(base: &Path) {
    let labs = list_labs(base);
    if labs.is_empty() {
        println!("no labs under {}", base.display());
    }
    for lab in labs {
        let owner = match (lab.reaping, lab.owner_alive) {
            (true, _) => "being torn down",
            (false, None) => "detached (fleetctl lab up)",
            (false, Some(true)) => "owned by a running process",
            (false, Some(false)) => "stale (owner died)",
        };
        println!(
            "{}  {} hosts  {}  {}",
            lab.id,
            lab.hosts,
            owner,
            lab.dir.display()
        );
    }
}
