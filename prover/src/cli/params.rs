//! `prover params import|list|verify`: the operator's view of the parameter
//! directory. Nothing here generates parameters (that is `prover setup`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::exit;
use prover::circuit::CircuitKind;
use prover::params::{NewDirectory, ParamStore};
use prover::setup::parse_circuit_size;

#[derive(Debug, clap::Args)]
pub struct ParamsCmdArgs {
    #[command(subcommand)]
    pub command: ParamsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ParamsCommand {
    /// Validate a parameter file made elsewhere (a ceremony, bellperson) and copy it into the directory.
    Import(ImportArgs),
    /// List the directory's entries: circuit, size, origin, checksum.
    List(DirArg),
    /// Check entries completely: layout, fit to the circuit, checksum (or every point, without a sidecar).
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
pub struct DirArg {
    /// Parameter directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The parameter file (bellperson's `Parameters::write` format).
    pub file: PathBuf,
    /// Circuit the parameters are for (chain, sha256).
    #[arg(long)]
    pub circuit: CircuitKind,
    /// Circuit size in constraints: 1024 or 2^10.
    #[arg(long, value_parser = parse_circuit_size)]
    pub size: usize,
    #[command(flatten)]
    pub dir: DirArg,
    /// Replace an entry imported earlier (a file without a sidecar is never replaced).
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Only this circuit (with --size); default: every entry.
    #[arg(long, requires = "size")]
    pub circuit: Option<CircuitKind>,
    /// Only this size (with --circuit): 1024 or 2^10.
    #[arg(long, value_parser = parse_circuit_size, requires = "circuit")]
    pub size: Option<usize>,
    #[command(flatten)]
    pub dir: DirArg,
}

fn open(dir: &DirArg) -> Result<ParamStore> {
    ParamStore::open(&dir.params_dir).with_context(|| {
        format!(
            "opening the parameter directory {}",
            dir.params_dir.display()
        )
    })
}

/// For the commands that only read: a missing directory is an error (its
/// message names the directory).
fn open_existing(dir: &DirArg) -> Result<ParamStore> {
    Ok(ParamStore::open_existing(&dir.params_dir)?)
}

/// Runs `prover params …`; the exit code is 0 when every entry checked is
/// sound, 1 otherwise.
pub fn run(args: ParamsCmdArgs) -> Result<u8> {
    match args.command {
        ParamsCommand::Import(a) => {
            // A refused import leaves nothing behind, not even the folder
            // it would have gone into.
            let new_dir = NewDirectory::if_absent(&a.dir.params_dir);
            let store = open(&a.dir)?;
            let meta = store
                .import(a.circuit, a.size, &a.file, a.replace)
                .with_context(|| format!("importing {}", a.file.display()))?;
            new_dir.keep();
            println!(
                "imported {} as {} (domain 2^{}, sha256 {})",
                a.file.display(),
                store.params_path(a.circuit, a.size).display(),
                meta.shape.log2_domain(),
                meta.sha256
            );
            Ok(exit::OK)
        }
        ParamsCommand::List(dir) => {
            let store = open_existing(&dir)?;
            let entries = store.list()?;
            let temps = store.temp_files()?;
            if entries.is_empty() && temps.is_empty() {
                println!("no parameter files in {}", dir.params_dir.display());
            }
            for t in &temps {
                let writer = match (t.writer, t.writer_alive) {
                    (Some(pid), true) => format!("unfinished write by pid {pid} (still running)"),
                    (Some(pid), false) => format!(
                        "unfinished write by pid {pid} (gone, or its pid now another program's; removed at the next start)"
                    ),
                    (None, _) => {
                        "a temporary name without a writer's pid (removed at the next start)".into()
                    }
                };
                println!("{}\t{} bytes\t{writer}", t.path.display(), t.bytes);
            }
            for e in &entries {
                match (&e.meta, &e.problem) {
                    (Some(m), _) => println!(
                        "{}-{}\tdomain 2^{}\t{} bytes\t{}\tsha256 {}",
                        e.circuit,
                        e.size,
                        m.shape.log2_domain(),
                        m.layout.file_len,
                        m.origin,
                        m.sha256
                    ),
                    (None, problem) => println!(
                        "{}-{}\t{}",
                        e.circuit,
                        e.size,
                        problem.as_deref().unwrap_or("unknown state")
                    ),
                }
            }
            Ok(exit::OK)
        }
        ParamsCommand::Verify(a) => {
            let store = open_existing(&a.dir)?;
            let targets: Vec<(CircuitKind, usize)> = match (a.circuit, a.size) {
                (Some(c), Some(s)) => vec![(c, s)],
                _ => store
                    .list()?
                    .into_iter()
                    .map(|e| (e.circuit, e.size))
                    .collect(),
            };
            let mut all_ok = true;
            for (kind, size) in targets {
                match store.verify_any(kind, size) {
                    Ok(what) => println!("{kind}-{size}: ok ({what})"),
                    Err(e) => {
                        all_ok = false;
                        println!("{kind}-{size}: FAILED: {e}");
                    }
                }
            }
            Ok(if all_ok { exit::OK } else { exit::ERROR })
        }
    }
}
