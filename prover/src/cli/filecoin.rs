//! The Filecoin subcommands: `prover c2`, `post` and `snap` (proved in this
//! process, [`FilecoinCommand`]), `prover client c2`, `post` and `snap` (sent
//! to a running daemon, [`ClientFilecoinCommand`]), each kind's input and the
//! job request it becomes, and `prover setup --filecoin` (TEST-ONLY
//! parameters under Filecoin's names). The two enums are flattened into the
//! top-level and the client commands, so a new kind is a variant of each and
//! its arms here; `main` and `cli::daemon` only hand them over.

use super::exit;
use super::one_shot::{check_outputs, code_of, ProveFlags};
use super::send::{refused_out, send_filecoin, FilecoinSend};
use super::setup::SetupArgs;
use anyhow::{Context, Result};
use clap::Subcommand;
use fleet_wire::api::{
    FilecoinSubmitRequest, PorepC2Request, SnapDealsRequest, WindowPostRequest, WinningPostRequest,
};
use prover::daemon::config::Config;
use prover::filecoin::c1::{self, C1Error, MAX_C1_BYTES};
use prover::filecoin::post::PostKind;
use prover::filecoin::registered::{parse_sector_size, SealProof};
use prover::filecoin::{setup as fil_setup, FilecoinError, UpdateProof};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The Filecoin proofs `prover` makes in this process, with Filecoin's
/// parameters.
#[derive(Debug, Subcommand)]
pub enum FilecoinCommand {
    /// Filecoin PoRep C2: prove a C1 output with Filecoin's parameters.
    C2(C2Args),
    /// Filecoin Window or Winning PoSt from vanilla proofs, with Filecoin's parameters.
    Post(PostArgs),
    /// Filecoin SnapDeals update proof from vanilla partition proofs, with Filecoin's parameters.
    Snap(SnapArgs),
}

/// `prover c2`, `prover post`, `prover snap`.
pub fn run(command: FilecoinCommand) -> Result<u8> {
    match command {
        FilecoinCommand::C2(args) => run_c2(args),
        FilecoinCommand::Post(args) => run_post(args),
        FilecoinCommand::Snap(args) => run_snap(args),
    }
}

/// The Filecoin proofs `prover client` sends to a running daemon.
#[derive(Debug, Subcommand)]
pub enum ClientFilecoinCommand {
    /// Send a Filecoin PoRep C2 (a C1 output) to the daemon, wait for it and write the proof.
    C2(ClientC2Args),
    /// Send a Window or Winning PoSt (vanilla proofs) to the daemon, wait for it and write the proof.
    Post(ClientPostArgs),
    /// Send a SnapDeals update (vanilla partition proofs) to the daemon, wait for it and write the proof.
    Snap(ClientSnapArgs),
}

/// `prover client c2`, `prover client post`, `prover client snap`: over
/// HTTP, or with `--grpc` as Curio sends them.
pub fn run_client(command: ClientFilecoinCommand) -> Result<u8> {
    match command {
        ClientFilecoinCommand::C2(a) => send(&a.send, &a.grpc, ("--c1", &a.input.c1), |seed| {
            Ok(FilecoinSubmitRequest::PorepC2(c2_request(&a.input, seed)?))
        }),
        ClientFilecoinCommand::Post(a) => {
            send(&a.send, &a.grpc, ("--vanilla", &a.input.vanilla), |seed| {
                read_post_request(&a.input, seed)
            })
        }
        ClientFilecoinCommand::Snap(a) => {
            send(&a.send, &a.grpc, ("--vanilla", &a.input.vanilla), |seed| {
                let bytes = read_input(&a.input.vanilla, "the vanilla proofs")?;
                Ok(a.input.request(&bytes, seed)?)
            })
        }
    }
}

/// Sends the request `request` makes (from the input file `input`, with
/// r, s from the seed given) over HTTP, or as Curio does where `--grpc`.
fn send(
    send: &FilecoinSend,
    grpc: &GrpcFlags,
    input: (&'static str, &Path),
    request: impl FnOnce(Option<u64>) -> Result<FilecoinSubmitRequest>,
) -> Result<u8> {
    if grpc.grpc {
        return send_grpc(send, grpc, input, request);
    }
    send_filecoin(send, input, &request(send.rs_seed)?)
}

#[derive(Debug, clap::Args)]
#[command(
    about = "Filecoin PoRep C2: prove a C1 output (seal_commit_phase1's JSON) with Filecoin's parameters",
    long_about = "Filecoin PoRep C2: prove a C1 output (seal_commit_phase1's JSON) with the Groth16 parameters of a Filecoin parameter cache.\n\n\
Accepts filecoin-proofs' SealCommitPhase1Output JSON, the filecoin-proofs-api form (with registered_proof) and lotus-bench's commit2 input ({SectorNum, Phase1Out}). \
Writes the proof exactly as seal_commit_phase2 returns it: one 192-byte Groth16 proof per partition, concatenated.\n\n\
Exit codes: 0 proof written; 1 other error; 2 bad command line; 3 a partition's proof did not verify; \
7 the C1 output was refused (malformed, another sector's, altered); 8 the parameters are missing or unusable (truncated, wrong digest, TEST-ONLY not allowed)."
)]
pub struct C2Args {
    #[command(flatten)]
    pub input: C1Input,
    #[command(flatten)]
    pub flags: ProveFlags,
}

/// The C1 output to prove and the sector it is for (`prover c2` and
/// `prover client c2`).
#[derive(Debug, clap::Args)]
pub struct C1Input {
    /// The C1 output (JSON); `-` reads standard input.
    #[arg(long)]
    pub c1: PathBuf,
    /// The sector number (required unless the C1 document carries it).
    #[arg(long)]
    pub sector_id: Option<u64>,
    #[command(flatten)]
    pub prover: ProverIdArg,
    /// Seal proof type, e.g. StackedDrg32GiBV1_1 (required unless the C1 document names it or --sector-size is given).
    #[arg(long)]
    pub registered_proof: Option<SealProof>,
    /// Sector size (2KiB, 8MiB, 512MiB, 32GiB, 64GiB): the V1_1 proof type of that size.
    #[arg(long, conflicts_with = "registered_proof", value_parser = parse_sector_size)]
    pub sector_size: Option<u64>,
}

impl C1Input {
    /// The seal proof type the command line names, if any.
    pub fn seal_proof(&self) -> Option<SealProof> {
        match (self.registered_proof, self.sector_size) {
            (Some(p), _) => Some(p),
            (None, Some(size)) => SealProof::current(size),
            (None, None) => None,
        }
    }
}

/// Whose proof: `--prover-id` or `--miner-id`.
#[derive(Debug, clap::Args)]
pub struct ProverIdArg {
    /// The prover id as 64 hex digits.
    #[arg(
        long,
        conflicts_with = "miner_id",
        required_unless_present = "miner_id",
        value_parser = super::checked::Checked(super::checked::hex32)
    )]
    pub prover_id: Option<String>,
    /// The miner's actor id (the prover id is its ID address payload, as Lotus derives it).
    #[arg(long)]
    pub miner_id: Option<u64>,
}

impl ProverIdArg {
    pub fn bytes(&self) -> Result<[u8; 32]> {
        match (&self.prover_id, self.miner_id) {
            (Some(hex), _) => c1::parse_prover_id(hex).map_err(anyhow::Error::msg),
            (None, Some(id)) => Ok(c1::prover_id_of_miner(id)),
            (None, None) => anyhow::bail!("--prover-id or --miner-id is required"),
        }
    }
}

/// The PoSt to prove (`prover post` and `prover client post`).
#[derive(Debug, clap::Args)]
pub struct PostInput {
    #[arg(long, value_enum)]
    pub kind: PostChoice,
    /// The vanilla proofs (JSON); `-` reads standard input.
    #[arg(long)]
    pub vanilla: PathBuf,
    /// The challenge randomness as 64 hex digits.
    #[arg(long, value_parser = super::checked::Checked(super::checked::hex32))]
    pub randomness: String,
    #[command(flatten)]
    pub prover: ProverIdArg,
    /// Sector size of the proven sectors (2KiB, 8MiB, 512MiB, 32GiB, 64GiB).
    #[arg(long, value_parser = parse_sector_size)]
    pub sector_size: u64,
    /// The WindowPoSt partition these sectors make up.
    #[arg(long, default_value_t = 0)]
    pub partition: usize,
}

impl PostInput {
    /// The PoSt job this input asks for, its vanilla proofs read.
    pub fn request(
        &self,
        vanilla: serde_json::Value,
        rs_seed: Option<u64>,
    ) -> Result<FilecoinSubmitRequest> {
        let prover_id = hex::encode(self.prover.bytes()?);
        let partition = u32::try_from(self.partition).context("--partition is too large")?;
        let randomness = self.randomness.clone();
        Ok(match self.post_kind() {
            PostKind::Window => FilecoinSubmitRequest::WindowPost(WindowPostRequest {
                prover_id,
                vanilla_proofs: vanilla,
                randomness,
                sector_size: self.sector_size,
                partition,
                rs_seed,
            }),
            PostKind::Winning => {
                if partition != 0 {
                    anyhow::bail!("--partition is taken by a window PoSt only");
                }
                FilecoinSubmitRequest::WinningPost(WinningPostRequest {
                    prover_id,
                    vanilla_proofs: vanilla,
                    randomness,
                    sector_size: self.sector_size,
                    rs_seed,
                })
            }
        })
    }

    pub fn post_kind(&self) -> PostKind {
        match self.kind {
            PostChoice::Winning => PostKind::Winning,
            PostChoice::Window => PostKind::Window,
        }
    }
}

/// The SnapDeals update to prove (`prover snap` and `prover client snap`).
#[derive(Debug, clap::Args)]
pub struct SnapInput {
    /// The update proof type: StackedDrg2KiBV1 .. StackedDrg64GiBV1, or its
    /// filecoin-ffi number 0-4.
    #[arg(long)]
    pub update_proof: UpdateProof,
    /// The sector's CommR before the update (its sector key's), 64 hex digits.
    #[arg(long, value_parser = super::checked::Checked(super::checked::hex32))]
    pub comm_r_old: String,
    /// CommR of the updated replica.
    #[arg(long, value_parser = super::checked::Checked(super::checked::hex32))]
    pub comm_r_new: String,
    /// CommD of the deal data.
    #[arg(long, value_parser = super::checked::Checked(super::checked::hex32))]
    pub comm_d_new: String,
    /// The vanilla partition proofs: a JSON array of PartitionProof, or of
    /// hex strings of their bincode (as filecoin-proofs-api returns them);
    /// `-` reads standard input.
    #[arg(long)]
    pub vanilla: PathBuf,
}

impl SnapInput {
    /// The SnapDeals job this input asks for, with `vanilla` the bytes of
    /// its `--vanilla` file.
    pub fn request(
        &self,
        vanilla: &[u8],
        rs_seed: Option<u64>,
    ) -> Result<FilecoinSubmitRequest, FilecoinError> {
        let vanilla_proofs =
            serde_json::from_slice(vanilla).map_err(|e| FilecoinError::SnapField {
                field: "vanilla_proofs",
                reason: prover::filecoin::bounded_reason(&e.to_string()),
            })?;
        Ok(FilecoinSubmitRequest::SnapDeals(SnapDealsRequest {
            // The update circuit takes no prover id.
            prover_id: String::new(),
            update_proof: self.update_proof.to_string(),
            comm_r_old: self.comm_r_old.clone(),
            comm_r_new: self.comm_r_new.clone(),
            comm_d_new: self.comm_d_new.clone(),
            vanilla_proofs,
            rs_seed,
        }))
    }
}

#[derive(Debug, clap::Args)]
#[command(
    about = "Filecoin SnapDeals update proof from its vanilla partition proofs, with Filecoin's parameters",
    long_about = "Filecoin SnapDeals (EmptySectorUpdate) proof from the vanilla partition proofs of an update (generate_partition_proofs' output), proven one partition at a time with the Groth16 parameters of a Filecoin parameter cache. Writes the proof as generate_empty_sector_update_proof_with_vanilla returns it.\n\n\
Exit codes: as `prover c2` (7: the commitments or vanilla proofs were refused)."
)]
pub struct SnapArgs {
    #[command(flatten)]
    pub input: SnapInput,
    #[command(flatten)]
    pub flags: ProveFlags,
}

/// `prover snap`.
fn run_snap(args: SnapArgs) -> Result<u8> {
    if let Some(code) = check_outputs(&args.flags, ("--vanilla", &args.input.vanilla)) {
        return Ok(code);
    }
    let bytes = read_input(&args.input.vanilla, "the vanilla proofs")?;
    match args.input.request(&bytes, args.flags.seed) {
        Ok(req) => super::one_shot::prove(&args.flags, req),
        Err(e) => fail(e),
    }
}

/// Reads at most `MAX_C1_BYTES` (+1, to tell a larger input apart) of
/// `what` (a C1 output, vanilla proofs) from `path`; `-` is standard input.
fn read_input(path: &Path, what: &str) -> Result<Vec<u8>> {
    let limit = MAX_C1_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {what} from standard input"))?;
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("opening {what} {}", path.display()))?
            .take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {what} {}", path.display()))?;
    }
    Ok(bytes)
}

fn fail(e: FilecoinError) -> Result<u8> {
    eprintln!("error: {e}");
    Ok(code_of(&e))
}

/// `prover c2`.
fn run_c2(args: C2Args) -> Result<u8> {
    if let Some(code) = check_outputs(&args.flags, ("--c1", &args.input.c1)) {
        return Ok(code);
    }
    let prover_id = hex::encode(args.input.prover.bytes()?);
    let bytes = read_input(&args.input.c1, "the C1 output")?;
    if bytes.len() > MAX_C1_BYTES {
        return fail(FilecoinError::C1(C1Error::TooLarge {
            bytes: bytes.len(),
            max: MAX_C1_BYTES,
        }));
    }
    let c1 = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return fail(FilecoinError::C1(C1Error::Json(e))),
    };
    drop(bytes);
    let req = FilecoinSubmitRequest::PorepC2(PorepC2Request {
        prover_id,
        c1,
        registered_proof: args.input.seal_proof().map(|p| p.to_string()),
        sector_id: args.input.sector_id,
        rs_seed: args.flags.seed,
    });
    super::one_shot::prove(&args.flags, req)
}

/// `prover setup --filecoin CIRCUIT`.
pub fn run_setup(args: SetupArgs) -> Result<u8> {
    let Some(circuit) = args.filecoin else {
        anyhow::bail!("--filecoin is required");
    };
    eprintln!("WARNING: {}", prover::setup::TEST_ONLY_WARNING);
    // A refused or failed run leaves no folder it created behind.
    let new_dir = prover::params::NewDirectory::if_absent(&args.param_cache);
    let engine = prover::setup::command::engine(args.backend.into())?;
    let generated = fil_setup::generate(&args.param_cache, circuit, args.seed, engine.as_ref());
    match generated {
        Ok(g) => {
            new_dir.keep();
            println!("{}", serde_json::to_string(&g)?);
            Ok(exit::OK)
        }
        Err(e) => fail(e),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PostChoice {
    Winning,
    Window,
}

#[derive(Debug, clap::Args)]
#[command(
    about = "Filecoin Window or Winning PoSt from vanilla proofs, with Filecoin's parameters",
    long_about = "Filecoin Window or Winning PoSt from vanilla proofs (a JSON array of FallbackPoStSectorProof, as generate_single_vanilla_proof returns them), \
proven one partition at a time with the Groth16 parameters of a Filecoin parameter cache. Writes the proof as \
generate_winning_post_with_vanilla / generate_single_window_post_with_vanilla return it.\n\n\
Exit codes: as `prover c2` (7: the vanilla proofs or randomness were refused)."
)]
pub struct PostArgs {
    #[command(flatten)]
    pub input: PostInput,
    #[command(flatten)]
    pub flags: ProveFlags,
}

/// `prover post`.
fn run_post(args: PostArgs) -> Result<u8> {
    let input = &args.input;
    if let Some(code) = check_outputs(&args.flags, ("--vanilla", &input.vanilla)) {
        return Ok(code);
    }
    let bytes = read_input(&input.vanilla, "the vanilla proofs")?;
    let vanilla_proofs = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return fail(FilecoinError::PostField {
                field: "vanilla proofs",
                reason: prover::filecoin::bounded_reason(&e.to_string()),
            })
        }
    };
    drop(bytes);
    let req = input.request(vanilla_proofs, args.flags.seed)?;
    super::one_shot::prove(&args.flags, req)
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Send a PoRep C2 to a running daemon: the C1 output (any form `prover c2` reads) goes to POST /v1/filecoin/jobs, the daemon checks it and proves its partitions in its pipeline; the proof is written as seal_commit_phase2 returns it.\n\n\
Exit codes: 0 proof written; 1 other error; 6 the job failed; 7 the daemon refused the C1 output; 8 the daemon lacks usable parameters."
)]
pub struct ClientC2Args {
    #[command(flatten)]
    pub input: C1Input,
    #[command(flatten)]
    pub send: FilecoinSend,
    #[command(flatten)]
    pub grpc: GrpcFlags,
}

/// `--grpc`: a client command sent as Curio sends it.
#[derive(Debug, clap::Args)]
pub struct GrpcFlags {
    /// Send it as Curio does instead: one `Prove` call to the daemon's gRPC
    /// service (cuzk.v1), at the unix socket or port of the config's
    /// `[grpc]`, the prover id as a miner id. Exit codes as over HTTP.
    #[arg(long)]
    pub grpc: bool,
    /// With --grpc: the call's request_id (Curio's idempotency key; a
    /// request id seen in the last hour attaches to that job).
    #[arg(long, requires = "grpc", value_parser = parse_request_id)]
    pub request_id: Option<String>,
}

/// The most bytes a `--request-id` may have (Curio's are ~40).
const MAX_REQUEST_ID: usize = 128;

fn parse_request_id(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > MAX_REQUEST_ID || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "a request id is 1 to {MAX_REQUEST_ID} printable ASCII characters without spaces"
        ));
    }
    Ok(s.to_string())
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Send a Window or Winning PoSt to a running daemon (a WinningPoSt goes ahead of every queued partition) and write its proof.\n\n\
Exit codes: as `prover client c2`."
)]
pub struct ClientPostArgs {
    #[command(flatten)]
    pub input: PostInput,
    #[command(flatten)]
    pub send: FilecoinSend,
    #[command(flatten)]
    pub grpc: GrpcFlags,
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Send a SnapDeals update proof to a running daemon and write its proof.\n\n\
Exit codes: as `prover client c2`."
)]
pub struct ClientSnapArgs {
    #[command(flatten)]
    pub input: SnapInput,
    #[command(flatten)]
    pub send: FilecoinSend,
    #[command(flatten)]
    pub grpc: GrpcFlags,
}

/// The request of `prover client c2`.
fn c2_request(input: &C1Input, rs_seed: Option<u64>) -> Result<PorepC2Request> {
    let prover_id = hex::encode(input.prover.bytes()?);
    let bytes = read_input(&input.c1, "the C1 output")?;
    let c1: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", input.c1.display()))?;
    Ok(PorepC2Request {
        prover_id,
        c1,
        registered_proof: input.seal_proof().map(|p| p.to_string()),
        sector_id: input.sector_id,
        rs_seed,
    })
}

/// The request of `prover client post`.
fn read_post_request(input: &PostInput, rs_seed: Option<u64>) -> Result<FilecoinSubmitRequest> {
    let bytes = read_input(&input.vanilla, "the vanilla proofs")?;
    let vanilla: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", input.vanilla.display()))?;
    input.request(vanilla, rs_seed)
}

/// `prover client c2|post|snap --grpc`: the request as Curio sends it, to
/// the daemon's gRPC service.
fn send_grpc(
    send: &FilecoinSend,
    grpc: &GrpcFlags,
    input: (&'static str, &Path),
    request: impl FnOnce(Option<u64>) -> Result<FilecoinSubmitRequest>,
) -> Result<u8> {
    use prover::daemon::grpc::client::{self, ClientError as GrpcError, Target};
    use tonic::Code;
    if let Some(code) = refused_out(send, input) {
        return Ok(code);
    }
    if send.rs_seed.is_some() {
        eprintln!("error: --rs-seed cannot go over gRPC (Curio's request has no such field)");
        return Ok(exit::USAGE);
    }
    let config = Config::load(&send.config)?;
    let Some(target) = Target::of(&config.grpc) else {
        anyhow::bail!(
            "{} has no [grpc] socket or listen: the daemon serves no gRPC",
            send.config.display()
        );
    };
    let req = request(None)?;
    let kind = req.kind();
    let request_id = match &grpc.request_id {
        Some(id) => id.clone(),
        None => format!(
            "client-{kind}-{}-{}",
            std::process::id(),
            prover::sys::clock::unix_millis()
        ),
    };
    let submit = match prover::daemon::grpc::curio::submit_of(&req, &request_id) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::C1_REFUSED);
        }
    };
    let max_message = usize::try_from(config.grpc.max_message_bytes.0).unwrap_or(usize::MAX);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the gRPC client's runtime")?;
    let started = std::time::Instant::now();
    let answer = runtime.block_on(client::prove(&target, submit, send.timeout, max_message));
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(match &e {
                GrpcError::Status(s) if s.code() == Code::InvalidArgument => exit::C1_REFUSED,
                GrpcError::Status(s) if s.code() == Code::FailedPrecondition => {
                    exit::PARAMS_UNUSABLE
                }
                GrpcError::NoProof { .. } => exit::JOB_FAILED,
                _ => exit::ERROR,
            });
        }
    };
    match &send.out {
        Some(path) => prover::filecoin::write_output(path, &answer.proof)
            .with_context(|| format!("writing the proof to {}", path.display()))?,
        None => println!("{}", hex::encode(&answer.proof)),
    }
    eprintln!(
        "{kind} job {} over gRPC ({target}, request_id {request_id}): {} bytes of proof in {:.1} s (daemon: total {} ms, gpu_compute {} ms)",
        answer.job_id,
        answer.proof.len(),
        started.elapsed().as_secs_f64(),
        answer.total_ms,
        answer.gpu_compute_ms
    );
    Ok(exit::OK)
}
