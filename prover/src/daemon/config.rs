//! The daemon's TOML configuration: every key has a default, unknown keys and
//! bad values are refused at start with the key's path and the reason.
//!
//! Values are validated while deserialising (sizes, durations, enums), so a
//! parse error already says what is wrong; [`ConfigError`] adds the file and
//! the dotted key path, recovered from the error's position in the text.
//! `docs/prover.example.toml` documents every key.

use crate::circuit::{CircuitKind, MAX_SIZE, MIN_SIZE};
use crate::memory_plan::MemoryPlan;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Smallest `pool.slab_size`: one page.
const MIN_SLAB: u64 = 4096;
/// Largest `pool.slab_size`: beyond this one slab is most of a host, and
/// nothing is left to pin (or give back) in parallel.
const MAX_SLAB: u64 = 64 << 30;

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("config {file}: {key}: {reason}{}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        file: PathBuf,
        /// Dotted key path (`pool.max_bytes`, `preload[1].size`), `<root>` when unknown.
        key: String,
        line: Option<usize>,
        reason: String,
    },
}

/// The resolved configuration. Relative paths are kept as written; they
/// resolve against the working directory (the install dir under fleetctl).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Bearer token every route but `/healthz` requires, when set.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "redact")]
    pub api_token: Option<String>,
    /// Serve a non-loopback `listen` address without `api_token`: every
    /// route, cancelling any job included, open to the network. Refused
    /// unless set; when set, every start logs a warning.
    pub allow_unauthenticated: bool,
    pub paths: Paths,
    pub memory: Memory,
    pub pool: Pool,
    pub gpu: Gpu,
    pub synthesis: Synthesis,
    pub queue: Queue,
    /// How long a drain may take before the daemon aborts.
    pub drain_timeout: HumanDuration,
    pub log: Log,
    /// Parameters loaded at start.
    pub preload: Vec<Preload>,
    /// Generate TEST-ONLY parameters (seeded toxic waste, NOT a trusted
    /// setup) for a circuit and size `params_dir` has no file for.
    pub test_params: bool,
    pub http: HttpLimits,
    pub filecoin: Filecoin,
    pub grpc: Grpc,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            api_token: None,
            allow_unauthenticated: false,
            paths: Paths::default(),
            memory: Memory::default(),
            pool: Pool::default(),
            gpu: Gpu::default(),
            synthesis: Synthesis::default(),
            queue: Queue::default(),
            drain_timeout: HumanDuration(Duration::from_secs(300)),
            log: Log::default(),
            preload: Vec::new(),
            test_params: false,
            http: Default::default(),
            filecoin: Filecoin::default(),
            grpc: Grpc::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    pub pid_file: PathBuf,
    /// The daemon's own log (appended).
    pub log_file: PathBuf,
    pub timing_log: PathBuf,
    /// Rotate the timing log when it grows past this.
    pub timing_rotate_bytes: ByteSize,
    /// Rotated timing logs kept (`timing.jsonl.1` .. `.N`).
    pub timing_keep: u32,
    pub params_dir: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            pid_file: "run/prover.pid".into(),
            log_file: "logs/prover.log".into(),
            timing_log: "logs/timing.jsonl".into(),
            timing_rotate_bytes: ByteSize(256 << 20),
            timing_keep: 5,
            params_dir: "params".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Memory {
    pub budget: BudgetSize,
    /// Left to the kernel and everything unbudgeted when `budget = "auto"`.
    pub safety_margin: ByteSize,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            budget: BudgetSize::Auto,
            safety_margin: ByteSize(2 << 30),
        }
    }
}

/// `auto` (host memory minus the safety margin) or a byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSize {
    Auto,
    Bytes(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocatorChoice {
    /// `cuda` when a CUDA device is used, else `mlock`.
    Auto,
    Mlock,
    Cuda,
    Heap,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pool {
    pub allocator: AllocatorChoice,
    /// Pinned at start: `auto` sizes it for the pipeline's partitions of the
    /// largest preload entry; the daemon is ready once the first partitions'
    /// share is pinned, the rest follows in the background.
    pub preallocate: BudgetSize,
    /// Most the pool may hold; `None` = half the budget (the rest is for working sets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<ByteSize>,
    /// Size of the slabs the pool pins and carves buffers from.
    pub slab_size: ByteSize,
    /// Idle regions are returned after this long unused.
    pub idle_shrink_after: HumanDuration,
    /// Allow falling back to pageable heap memory when page-locking fails.
    pub pageable: bool,
}

impl Default for Pool {
    fn default() -> Self {
        Self {
            allocator: AllocatorChoice::Auto,
            preallocate: BudgetSize::Auto,
            max_bytes: None,
            slab_size: ByteSize(crate::pool::DEFAULT_SLAB_BYTES),
            idle_shrink_after: HumanDuration(Duration::from_secs(300)),
            pageable: false,
        }
    }
}

/// `"all"` or a list of ordinals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    All,
    List(Vec<u32>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gpu {
    /// `"all"`: every CUDA device, or the CPU backend where there is none.
    /// `[]`: the CPU backend. A list: exactly those devices (start fails if one is missing).
    pub devices: Devices,
    /// Device worker threads per GPU (or CPU workers on the CPU backend).
    pub workers_per_device: u32,
}

impl Default for Gpu {
    fn default() -> Self {
        Self {
            devices: Devices::All,
            workers_per_device: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Synthesis {
    /// Synthesis worker threads.
    pub concurrency: u32,
    /// Partitions synthesised ahead of the devices (being synthesised or
    /// waiting for a device); workers beyond it idle. 0 turns pipelining off
    /// (each device worker synthesises its own partition, then proves it).
    pub lookahead: u32,
    /// Synthesise bundled circuits from constraints compiled once per
    /// circuit and size (kept beside the parameters): a witness-only pass
    /// and a, b, c by sparse products, instead of building every constraint.
    pub compiled: bool,
    /// Partitions of each recording that also check the circuit against it,
    /// constraint by constraint, before it is trusted.
    pub check_first: u32,
}

/// The most `synthesis.check_first` partitions (beyond it, checking every
/// partition is what `compiled = false` is for).
pub const MAX_CHECK_FIRST: u32 = 1_000_000;

/// The longest key path an error quotes: a hostile file nests tables
/// thousands deep, and the line number already points at the place.
const MAX_KEY_CHARS: usize = 120;

fn shorten_key(key: String) -> String {
    match key.char_indices().nth(MAX_KEY_CHARS) {
        Some((at, _)) => format!("{}…", &key[..at]),
        None => key,
    }
}

/// Bounds of the counts that size threads, queues and file scans: past them
/// a value is a typo, and taken as given it would start that many threads,
/// allocate a queue that long or look for that many rotated files.
pub const MAX_SYNTHESIS_THREADS: u32 = 1024;
pub const MAX_LOOKAHEAD: u32 = 4096;
pub const MAX_WORKERS_PER_DEVICE: u32 = 16;
pub const MAX_TIMING_KEEP: u32 = 1000;
/// The smallest fixed `memory.budget`: a budget that cannot hold the
/// smallest partition only turns every job away.
pub const MIN_BUDGET: u64 = 1 << 20;
/// The largest config file read: a config is a few KiB of TOML.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl Default for Synthesis {
    fn default() -> Self {
        Self {
            concurrency: 1,
            lookahead: 1,
            compiled: true,
            check_first: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Queue {
    /// Jobs accepted and not finished; a submission beyond it gets 429.
    pub max_jobs: u32,
}

impl Default for Queue {
    fn default() -> Self {
        Self { max_jobs: 64 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub level: LogLevel,
    pub format: LogFormat,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: LogLevel::Info,
            format: LogFormat::Text,
        }
    }
}

/// Parameters to have ready before `/readyz` turns 200.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preload {
    pub circuit: CircuitKind,
    pub size: u64,
}

impl Config {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let read = |source| ConfigError::Read {
            file: file.to_path_buf(),
            source,
        };
        // A FIFO or a device would block or never end: only a regular file,
        // and only as much of it as a config can be.
        let meta = std::fs::metadata(file).map_err(read)?;
        if !meta.is_file() {
            return Err(read(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(
                std::fs::File::open(file).map_err(read)?,
                MAX_CONFIG_BYTES + 1,
            ),
            &mut text,
        )
        .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(read(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {MAX_CONFIG_BYTES} bytes; not a config file"),
            )));
        }
        Self::parse(&text, file)
    }

    /// Parses config text; `file` only names the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let (key, line) = match e.span() {
                Some(span) => {
                    let (key, line) = key_at(text, span.start);
                    (shorten_key(key), Some(line))
                }
                None => ("<root>".to_string(), None),
            };
            ConfigError::Invalid {
                file: file.to_path_buf(),
                key,
                line,
                reason: e.message().trim().to_string(),
            }
        })?;
        config.check(file)?;
        Ok(config)
    }

    /// Whether the API would answer the network without a token: a
    /// listener on any address but loopback (`0.0.0.0` and `::` included)
    /// with no `api_token`.
    pub fn exposed_without_token(&self) -> bool {
        self.api_token.is_none() && !self.listen.ip().is_loopback()
    }

    /// Cross-field checks serde cannot express.
    fn check(&self, file: &Path) -> Result<(), ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::Invalid {
            file: file.to_path_buf(),
            key: key.to_string(),
            line: None,
            reason,
        };
        let within = |key: &str, v: u32, range: std::ops::RangeInclusive<u32>| {
            if range.contains(&v) {
                Ok(())
            } else {
                Err(bad(
                    key,
                    format!(
                        "{v} is out of range: must be between {} and {}",
                        range.start(),
                        range.end()
                    ),
                ))
            }
        };
        within(
            "synthesis.concurrency",
            self.synthesis.concurrency,
            1..=MAX_SYNTHESIS_THREADS,
        )?;
        within(
            "synthesis.lookahead",
            self.synthesis.lookahead,
            0..=MAX_LOOKAHEAD,
        )?;
        within(
            "gpu.workers_per_device",
            self.gpu.workers_per_device,
            1..=MAX_WORKERS_PER_DEVICE,
        )?;
        within(
            "paths.timing_keep",
            self.paths.timing_keep,
            1..=MAX_TIMING_KEEP,
        )?;
        if let BudgetSize::Bytes(b) = self.memory.budget {
            if b < MIN_BUDGET {
                return Err(bad(
                    "memory.budget",
                    format!("{b} bytes is too small: must be at least {MIN_BUDGET} (1MiB)"),
                ));
            }
        }
        if self.synthesis.check_first > MAX_CHECK_FIRST {
            return Err(bad(
                "synthesis.check_first",
                format!("must be at most {MAX_CHECK_FIRST}"),
            ));
        }
        if self.queue.max_jobs == 0 {
            return Err(bad("queue.max_jobs", "must be at least 1".into()));
        }
        if let Some(t) = &self.api_token {
            if t.trim().is_empty() {
                return Err(bad(
                    "api_token",
                    "is empty; remove the key to disable authentication".into(),
                ));
            }
        }
        if let Err((key, reason)) = self.grpc.check() {
            return Err(bad(key, reason));
        }
        if self.grpc.exposed() && !self.allow_unauthenticated {
            return Err(bad(
                "grpc.listen",
                format!(
                    "{} is not a loopback address: the gRPC service takes no token (Curio cannot \
                     send one), so every proof and cancel would be open to the network; listen on \
                     127.0.0.1 or a unix socket (grpc.socket), or set allow_unauthenticated = true to mean it",
                    self.grpc.listen.map(|a| a.ip().to_string()).unwrap_or_default()
                ),
            ));
        }
        if self.exposed_without_token() && !self.allow_unauthenticated {
            return Err(bad(
                "listen",
                format!(
                    "{} is not a loopback address and api_token is unset: every route, \
                     cancelling any job included, would be open to the network; set api_token, \
                     listen on 127.0.0.1, or set allow_unauthenticated = true to mean it",
                    self.listen.ip()
                ),
            ));
        }
        self.check_pool(&bad)?;
        if let Err((key, reason)) = self.http.check() {
            return Err(bad(key, reason));
        }
        if let Err((key, reason)) = self.filecoin.check() {
            return Err(bad(key, reason));
        }
        for (i, p) in self.preload.iter().enumerate() {
            let range = MIN_SIZE as u64..=MAX_SIZE as u64;
            if !range.contains(&p.size) {
                return Err(bad(
                    &format!("preload[{i}].size"),
                    format!(
                        "{} is out of range: must be between {MIN_SIZE} and {MAX_SIZE} constraints",
                        p.size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Pool sizes that contradict each other or the budget, caught here so
    /// nothing is started (or pinned) with them.
    fn check_pool(&self, bad: &impl Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        let pool = &self.pool;
        let slab = pool.slab_size.0;
        if !(MIN_SLAB..=MAX_SLAB).contains(&slab) {
            return Err(bad(
                "pool.slab_size",
                format!("{slab} bytes is out of range: must be between {MIN_SLAB} and {MAX_SLAB}"),
            ));
        }
        let budget = match self.memory.budget {
            BudgetSize::Bytes(b) => Some(b),
            BudgetSize::Auto => None,
        };
        if let Some(budget) = budget {
            MemoryPlan::new(budget, pool.max_bytes.map(|m| m.0))
                .map_err(|e| bad("pool.max_bytes", e.to_string()))?;
        }
        if let BudgetSize::Bytes(want) = pool.preallocate {
            // The cap the pool will have: max_bytes, or half a fixed budget.
            let cap = pool.max_bytes.map(|m| (m.0, "pool.max_bytes")).or(budget
                .and_then(|b| MemoryPlan::new(b, None).ok())
                .map(|p| (p.pool, "half of memory.budget (pool.max_bytes unset)")));
            if let Some((cap, what)) = cap {
                if want > cap {
                    return Err(bad(
                        "pool.preallocate",
                        format!(
                            "{want} bytes exceed the pool's cap of {cap} bytes ({what}); \
                             preallocate at most the cap"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The effective configuration as one line of JSON (the token redacted).
    pub fn effective(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The dotted key path and 1-based line at byte `offset` of TOML `text`:
/// the nearest table header above, joined with the key on that line.
fn key_at(text: &str, offset: usize) -> (String, usize) {
    let offset = offset.min(text.len());
    let line_no = text[..offset].matches('\n').count();
    let mut table = String::new();
    let mut array_index: std::collections::HashMap<String, usize> = Default::default();
    let mut key = None;
    for (i, raw) in text.lines().enumerate().take(line_no + 1) {
        let line = raw.trim();
        if let Some(h) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let name = h.trim().to_string();
            let n = array_index
                .entry(name.clone())
                .and_modify(|n| *n += 1)
                .or_insert(0);
            table = format!("{name}[{n}]");
            if i == line_no {
                key = Some(String::new());
            }
        } else if let Some(h) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            table = h.trim().to_string();
            if i == line_no {
                key = Some(String::new());
            }
        } else if i == line_no {
            key = line
                .split('=')
                .next()
                .map(|k| k.trim().trim_matches('"').to_string());
        }
    }
    let key = key.unwrap_or_default();
    let path = match (table.is_empty(), key.is_empty()) {
        (true, true) => "<root>".to_string(),
        (true, false) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    };
    (path, line_no + 1)
}

fn redact<S: Serializer>(token: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match token {
        Some(_) => s.serialize_str("<redacted>"),
        None => s.serialize_none(),
    }
}

/// A byte count written as an integer or a string with a binary unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// Parses `"64GiB"`, `"512 MiB"`, `"4096"`, `"12B"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => 0,
    };
    let bad = || format!("invalid size {s:?}: expected bytes or a number with KiB/MiB/GiB/TiB");
    if num.is_empty() || mult == 0 {
        return Err(bad());
    }
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(bad)
}

/// Writes bytes with the largest binary unit that divides them exactly.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

struct SizeVisitor {
    allow_auto: bool,
}

impl de::Visitor<'_> for SizeVisitor {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.allow_auto {
            f.write_str("\"auto\", bytes or a number with KiB/MiB/GiB")
        } else {
            f.write_str("bytes or a number with KiB/MiB/GiB")
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("invalid size {v}: must not be negative")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if self.allow_auto && v == "auto" {
            return Ok(None);
        }
        parse_size(v).map(Some).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(SizeVisitor { allow_auto: false })? {
            Some(v) => Ok(ByteSize(v)),
            None => Err(de::Error::custom("\"auto\" is not allowed here")),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(self.0))
    }
}

impl<'de> Deserialize<'de> for BudgetSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match d.deserialize_any(SizeVisitor { allow_auto: true })? {
            Some(v) => BudgetSize::Bytes(v),
            None => BudgetSize::Auto,
        })
    }
}

impl Serialize for BudgetSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BudgetSize::Auto => s.serialize_str("auto"),
            BudgetSize::Bytes(b) => s.serialize_str(&format_size(*b)),
        }
    }
}

/// A duration written as `"30s"`, `"5m"`, `"1h 30m"` (humantime syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(HumanDuration)
            .map_err(|e| {
                de::Error::custom(format!(
                    "invalid duration {s:?}: {e} (e.g. \"30s\", \"5m\")"
                ))
            })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            List(Vec<u32>),
        }
        match Raw::deserialize(d).map_err(|_| {
            de::Error::custom("expected \"all\" or a list of GPU ordinals such as [0, 1]")
        })? {
            Raw::Word(w) if w == "all" => Ok(Devices::All),
            Raw::Word(w) => Err(de::Error::custom(format!(
                "invalid devices {w:?}: expected \"all\" or a list of GPU ordinals such as [0, 1]"
            ))),
            Raw::List(l) => Ok(Devices::List(l)),
        }
    }
}

impl Serialize for Devices {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Devices::All => s.serialize_str("all"),
            Devices::List(l) => l.serialize(s),
        }
    }
}

/// `[filecoin]` in the daemon's config: Filecoin proof jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Filecoin {
    /// Filecoin's parameter cache folder (`FIL_PROOFS_PARAMETER_CACHE`'s
    /// layout), read in place and never written.
    pub param_cache: PathBuf,
    /// Accept TEST-ONLY parameter files (`prover setup --filecoin`) for test
    /// sector sizes; a production cache never needs it.
    pub allow_test_params: bool,
    /// Largest body of `POST /v1/filecoin/jobs` (a 32 GiB sector's C1
    /// output is tens of MB of JSON); other routes keep `http.max_body_bytes`.
    pub max_body_bytes: ByteSize,
    /// How long such a body may take to arrive, from the end of its head.
    pub body_read_timeout: HumanDuration,
    /// Filecoin job bodies read (and checked) at once, so large bodies cannot
    /// pile up in memory; another waits for a slot for up to
    /// `body_read_timeout`, then is answered 503 `busy`.
    pub max_concurrent_bodies: u32,
    /// Parameter sets loaded at start, each with its constraints recorded,
    /// so the first proof of each (a WinningPoSt due within its epoch)
    /// waits for neither: `["winning-post:32GiB", "StackedDrg32GiBV1_1"]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preload: Vec<crate::filecoin::FilCircuit>,
}

/// The most `filecoin.preload` may name (every kind at every size is 15).
pub const MAX_FILECOIN_PRELOAD: usize = 16;

/// The most a Filecoin job body may be configured to: the C1 reader's own cap
/// plus room for the request's other fields.
pub const MAX_FILECOIN_BODY: u64 = crate::filecoin::c1::MAX_C1_BYTES as u64 + (1 << 20);

impl Default for Filecoin {
    fn default() -> Self {
        Self {
            param_cache: crate::filecoin::cache::DEFAULT_CACHE_DIR.into(),
            allow_test_params: false,
            max_body_bytes: ByteSize(MAX_FILECOIN_BODY),
            body_read_timeout: HumanDuration(Duration::from_secs(300)),
            max_concurrent_bodies: 2,
            preload: Vec::new(),
        }
    }
}

impl Filecoin {
    /// The key (under `filecoin.`) and reason of the first unusable value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let body = self.max_body_bytes.0;
        if !(1..=MAX_FILECOIN_BODY).contains(&body) {
            return Err((
                "filecoin.max_body_bytes",
                format!("{body} bytes is out of range: must be between 1 and {MAX_FILECOIN_BODY}"),
            ));
        }
        if self.body_read_timeout.0.is_zero() {
            return Err(("filecoin.body_read_timeout", "must be more than 0s".into()));
        }
        if !(1..=64).contains(&self.max_concurrent_bodies) {
            return Err((
                "filecoin.max_concurrent_bodies",
                format!(
                    "{} is out of range: must be between 1 and 64",
                    self.max_concurrent_bodies
                ),
            ));
        }
        if self.preload.len() > MAX_FILECOIN_PRELOAD {
            return Err((
                "filecoin.preload",
                format!(
                    "names {} parameter sets; at most {MAX_FILECOIN_PRELOAD}",
                    self.preload.len()
                ),
            ));
        }
        Ok(())
    }
}

/// `[grpc]` in the daemon's config: the `cuzk.v1.ProvingEngine` service
/// Curio calls. Off unless `listen` or `socket` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Grpc {
    /// TCP address (h2c); a non-loopback one needs `allow_unauthenticated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Unix socket path (Curio: `unix:///run/curio/cuzk.sock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The socket's permission bits, octal as a string.
    pub socket_mode: FileMode,
    /// The socket's group (a name or a number), so Curio's user can connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// Largest message either way (a 32 GiB C1 output is ~50 MB).
    pub max_message_bytes: ByteSize,
}

/// The most `grpc.max_message_bytes` may be: the C1 reader's cap plus room
/// for the request's other fields.
pub const MAX_GRPC_MESSAGE: u64 = MAX_FILECOIN_BODY;
/// Longest unix socket path (`sun_path` holds 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

impl Default for Grpc {
    fn default() -> Self {
        Self {
            listen: None,
            socket: None,
            socket_mode: FileMode(0o660),
            socket_group: None,
            max_message_bytes: ByteSize(256 << 20),
        }
    }
}

impl Grpc {
    /// Whether the service would listen beyond loopback.
    pub fn exposed(&self) -> bool {
        self.listen.is_some_and(|a| !a.ip().is_loopback())
    }

    /// The key (under `grpc.`) and reason of the first unusable value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let m = self.max_message_bytes.0;
        if !((1 << 20)..=MAX_GRPC_MESSAGE).contains(&m) {
            return Err((
                "grpc.max_message_bytes",
                format!("{m} bytes is out of range: must be between 1MiB and {MAX_GRPC_MESSAGE}"),
            ));
        }
        if let Some(p) = &self.socket {
            let len = p.as_os_str().len();
            if len == 0 || len > MAX_SOCKET_PATH {
                return Err((
                    "grpc.socket",
                    format!("a path of {len} bytes: must be 1 to {MAX_SOCKET_PATH}"),
                ));
            }
        }
        if self.socket_mode.0 & 0o006 != 0 {
            return Err((
                "grpc.socket_mode",
                format!(
                    "{:o} lets every local user connect; use the group bits (0660 and grpc.socket_group)",
                    self.socket_mode.0
                ),
            ));
        }
        if let Some(g) = &self.socket_group {
            if g.is_empty() || g.len() > 64 {
                return Err((
                    "grpc.socket_group",
                    "must be a group name or number of 1 to 64 bytes".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Permission bits written as an octal string (`"0660"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMode(pub u32);

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        u32::from_str_radix(s.trim(), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .map(FileMode)
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "invalid mode {:?}: expected octal permission bits such as \"0660\"",
                    s.chars().take(16).collect::<String>()
                ))
            })
    }
}

impl Serialize for FileMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:04o}", self.0))
    }
}

/// `[http]` in the daemon's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpLimits {
    /// A connection must deliver a complete request head within this after
    /// it opens or after its previous response; otherwise it is closed. This
    /// is also the idle timeout of keep-alive connections.
    pub header_read_timeout: HumanDuration,
    /// A request body must arrive completely within this, counted from the
    /// end of its head, however it trickles in (answered 408).
    pub body_read_timeout: HumanDuration,
    /// Connections served at once with the whole API. Past it, and past
    /// `max_connections_per_peer` for one address, a connection is served by
    /// the probe reserve or closed.
    pub max_connections: u32,
    /// Connections one peer address may hold with the whole API at once.
    pub max_connections_per_peer: u32,
    /// Connections beyond the caps that still get `/healthz` and `/readyz`
    /// answered (every other route: 503 `too_many_connections`), one request
    /// each, with a short head timeout; beyond these a connection is closed
    /// at once.
    pub probe_connections: u32,
    /// Largest request body (answered 413).
    pub max_body_bytes: ByteSize,
    /// Longest request target, path and query (answered 414).
    pub max_uri_bytes: ByteSize,
    /// Most bytes of request headers, names and values (answered 431).
    pub max_header_bytes: ByteSize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HumanDuration(Duration::from_secs(10)),
            body_read_timeout: HumanDuration(Duration::from_secs(30)),
            max_connections: 1024,
            max_connections_per_peer: 256,
            probe_connections: 64,
            max_body_bytes: ByteSize(64 << 10),
            max_uri_bytes: ByteSize(8 << 10),
            max_header_bytes: ByteSize(16 << 10),
        }
    }
}

impl HttpLimits {
    /// The key (under `http.`) and reason of the first unusable value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let zero = |d: &HumanDuration| d.0.is_zero();
        if zero(&self.header_read_timeout) {
            return Err(("http.header_read_timeout", "must be more than 0s".into()));
        }
        if zero(&self.body_read_timeout) {
            return Err(("http.body_read_timeout", "must be more than 0s".into()));
        }
        if self.max_connections == 0 {
            return Err(("http.max_connections", "must be at least 1".into()));
        }
        if self.max_connections_per_peer == 0 {
            return Err(("http.max_connections_per_peer", "must be at least 1".into()));
        }
        for (key, v) in [
            ("http.max_connections", self.max_connections),
            (
                "http.max_connections_per_peer",
                self.max_connections_per_peer,
            ),
            ("http.probe_connections", self.probe_connections),
        ] {
            if v > MAX_CONNECTIONS {
                return Err((
                    key,
                    format!("{v} is out of range: at most {MAX_CONNECTIONS}"),
                ));
            }
        }
        // Our own limits must stay inside hyper's read buffer (see `serve`),
        // so that they, not hyper's parser, answer oversized requests.
        for (key, v) in [
            ("http.max_uri_bytes", self.max_uri_bytes.0),
            ("http.max_header_bytes", self.max_header_bytes.0),
        ] {
            if !(256..=MAX_HEAD_LIMIT).contains(&v) {
                return Err((
                    key,
                    format!("{v} is out of range: 256 ..= {MAX_HEAD_LIMIT}"),
                ));
            }
        }
        if !(MIN_BODY_LIMIT..=MAX_BODY_LIMIT).contains(&self.max_body_bytes.0) {
            return Err((
                "http.max_body_bytes",
                format!(
                    "{} is out of range: {MIN_BODY_LIMIT} ..= {MAX_BODY_LIMIT}",
                    self.max_body_bytes.0
                ),
            ));
        }
        Ok(())
    }

    /// hyper's read buffer: room for a head at both our limits, with slack,
    /// so a head just past them still reaches our JSON answers.
    pub(crate) fn read_buffer(&self) -> usize {
        (2 * (self.max_uri_bytes.0 + self.max_header_bytes.0) + (16 << 10)) as usize
    }
}

/// Most connections any one `[http]` cap may allow (a file descriptor each).
const MAX_CONNECTIONS: u32 = 1 << 16;
/// Largest `max_uri_bytes` / `max_header_bytes` accepted.
const MAX_HEAD_LIMIT: u64 = 1 << 20;
/// Largest `max_body_bytes` accepted (job bodies are a few hundred bytes).
const MAX_BODY_LIMIT: u64 = 16 << 20;
/// A job submission is a few hundred bytes of JSON; a smaller limit refuses them all.
const MIN_BODY_LIMIT: u64 = 1 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("prover.toml"))
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.listen.to_string(), "127.0.0.1:7878");
        assert_eq!(c.paths.pid_file, Path::new("run/prover.pid"));
        assert_eq!(c.memory.safety_margin, ByteSize(2 << 30));
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../../../docs/prover.example.toml");
        parse(text).unwrap();
    }

    #[test]
    fn counts_that_size_threads_queues_and_scans_are_bounded() {
        for (text, key, range) in [
            (
                "[synthesis]\nconcurrency = 100000\n",
                "synthesis.concurrency",
                "between 1 and 1024",
            ),
            (
                "[synthesis]\nlookahead = 4294967295\n",
                "synthesis.lookahead",
                "between 0 and 4096",
            ),
            (
                "[gpu]\nworkers_per_device = 17\n",
                "gpu.workers_per_device",
                "between 1 and 16",
            ),
            (
                "[paths]\ntiming_keep = 4294967295\n",
                "paths.timing_keep",
                "between 1 and 1000",
            ),
        ] {
            let e = err(text);
            assert!(
                e.contains(&format!("{key}: ")) && e.contains(range),
                "{text}: {e}"
            );
        }
        let c = parse("[synthesis]\nconcurrency = 1024\nlookahead = 4096\n[gpu]\nworkers_per_device = 16\n[paths]\ntiming_keep = 1000\n").unwrap();
        assert_eq!((c.synthesis.concurrency, c.paths.timing_keep), (1024, 1000));
        let e = err("[memory]\nbudget = 0\n");
        assert!(e.contains("memory.budget: 0 bytes is too small"), "{e}");
        assert!(parse("[memory]\nbudget = \"1MiB\"\n").is_ok());
        let e = err("[http]\nmax_body_bytes = 0\n");
        assert!(e.contains("http.max_body_bytes: 0 is out of range"), "{e}");
    }

    #[test]
    fn a_deeply_nested_key_is_quoted_shortened() {
        let text = format!("[{}]\nx = \"y\"\n", vec!["a"; 5000].join("."));
        let e = err(&text);
        assert!(e.len() < 600, "{} chars: {}", e.len(), &e[..200]);
        assert!(e.contains("…"), "{e}");
    }

    #[test]
    fn only_a_regular_file_of_config_size_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let e = Config::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, "#".repeat(MAX_CONFIG_BYTES as usize + 1)).unwrap();
        let e = Config::load(&big).unwrap_err().to_string();
        assert!(e.contains("larger than 1048576 bytes"), "{e}");
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "#".repeat(MAX_CONFIG_BYTES as usize)).unwrap();
        assert!(Config::load(&ok).is_ok());
    }

    #[test]
    fn sizes_accept_integers_and_binary_units() {
        let c = parse(
            "[memory]\nbudget = \"64GiB\"\n[pool]\nmax_bytes = 1073741824\npreallocate = \"512 MiB\"\nslab_size = \"4 KiB\"\n",
        )
        .unwrap();
        assert_eq!(c.memory.budget, BudgetSize::Bytes(64 << 30));
        assert_eq!(c.pool.max_bytes, Some(ByteSize(1 << 30)));
        assert_eq!(c.pool.preallocate, BudgetSize::Bytes(512 << 20));
        assert_eq!(c.pool.slab_size, ByteSize(4096));
    }

    #[test]
    fn pool_sizes_that_contradict_each_other_are_refused_when_read() {
        // Preallocating exactly the cap is fine: it is rounded within it.
        let c = parse("[pool]\nmax_bytes = \"32GiB\"\npreallocate = \"32GiB\"\n").unwrap();
        assert_eq!(c.pool.preallocate, BudgetSize::Bytes(32 << 30));
        let e = err("[pool]\nmax_bytes = \"32GiB\"\npreallocate = \"33GiB\"\n");
        assert!(
            e.contains("pool.preallocate: 35433480192 bytes exceed the pool's cap of 34359738368 bytes (pool.max_bytes)"),
            "{e}"
        );
        let e = err("[memory]\nbudget = \"8GiB\"\n[pool]\npreallocate = \"5GiB\"\n");
        assert!(e.contains("half of memory.budget"), "{e}");
        let e = err("[memory]\nbudget = \"8GiB\"\n[pool]\nmax_bytes = \"8GiB\"\n");
        assert!(
            e.contains("pool.max_bytes: 8589934592 bytes leave nothing"),
            "{e}"
        );
        assert!(
            err("[pool]\nslab_size = 100\n").contains("pool.slab_size: 100 bytes is out of range")
        );
    }

    #[test]
    fn bad_size_names_the_key_and_the_reason() {
        let e = err(
            "listen = \"127.0.0.1:1\"\n\n[pool]\nallocator = \"mlock\"\nmax_bytes = \"12XB\"\n",
        );
        assert!(
            e.contains("pool.max_bytes: invalid size \"12XB\": expected bytes or a number with KiB/MiB/GiB"),
            "{e}"
        );
        assert!(e.contains("line 5"), "{e}");
    }

    #[test]
    fn unknown_key_names_its_path() {
        let e = err("[pool]\nmax_bytez = 1\n");
        assert!(e.contains("pool.max_bytez"), "{e}");
        assert!(e.contains("unknown field"), "{e}");
        let e = err("lisen = \"127.0.0.1:1\"\n");
        assert!(e.contains("lisen: unknown field"), "{e}");
        let e = err("[poool]\n");
        assert!(e.contains("poool"), "{e}");
    }

    #[test]
    fn bad_enum_and_duration_values_are_refused() {
        assert!(err("[pool]\nallocator = \"gpu\"\n").contains("pool.allocator"));
        let e = err("drain_timeout = \"soon\"\n");
        assert!(
            e.contains("drain_timeout: invalid duration \"soon\""),
            "{e}"
        );
        let e = err("[gpu]\ndevices = \"some\"\n");
        assert!(e.contains("gpu.devices"), "{e}");
        let e = err("[synthesis]\nconcurrency = 0\n");
        assert!(
            e.contains("synthesis.concurrency: 0 is out of range: must be between 1 and 1024"),
            "{e}"
        );
        let e = err("[[preload]]\ncircuit = \"chain\"\nsize = 1024\n[[preload]]\ncircuit = \"nope\"\nsize = 1\n");
        assert!(
            e.contains("preload[1].circuit: unknown variant `nope`"),
            "{e}"
        );
        let e = err("[[preload]]\ncircuit = \"chain\"\nsize = 3\n");
        assert!(e.contains("preload[0].size: 3 is out of range"), "{e}");
    }

    #[test]
    fn a_listener_beyond_loopback_needs_a_token_or_an_explicit_allowance() {
        for listen in ["0.0.0.0:7878", "[::]:7878", "10.1.2.3:7878"] {
            let e = parse(&format!("listen = \"{listen}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("listen:"), "{e}");
            assert!(e.contains("api_token is unset"), "{e}");
            assert!(e.contains("allow_unauthenticated = true"), "{e}");
            let with_token = parse(&format!("listen = \"{listen}\"\napi_token = \"t\"\n")).unwrap();
            assert!(!with_token.exposed_without_token());
            let allowed = parse(&format!(
                "listen = \"{listen}\"\nallow_unauthenticated = true\n"
            ))
            .unwrap();
            assert!(allowed.exposed_without_token());
        }
        for listen in ["127.0.0.1:0", "127.8.9.1:7878", "[::1]:7878"] {
            let c = parse(&format!("listen = \"{listen}\"\n")).unwrap();
            assert!(!c.exposed_without_token(), "{listen}");
        }
    }

    #[test]
    fn the_grpc_section_is_checked_when_read() {
        let e = parse("[grpc]\nlisten = \"0.0.0.0:9820\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("grpc.listen") && e.contains("takes no token"),
            "{e}"
        );
        // A token does not help: Curio cannot send one.
        let e = parse("api_token = \"t\"\n[grpc]\nlisten = \"0.0.0.0:9820\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("grpc.listen"), "{e}");
        let c = parse("allow_unauthenticated = true\n[grpc]\nlisten = \"0.0.0.0:9820\"\n").unwrap();
        assert!(c.grpc.exposed());
        let c = parse("[grpc]\nlisten = \"127.0.0.1:9820\"\nsocket = \"run/p.sock\"\n").unwrap();
        assert!(!c.grpc.exposed());
        assert_eq!(c.grpc.socket_mode, FileMode(0o660));
        let e = parse("[grpc]\nsocket_mode = \"0666\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("grpc.socket_mode"), "{e}");
        let e = parse("[grpc]\nsocket_mode = \"rw\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("octal"), "{e}");
        let e = parse(&format!("[grpc]\nsocket = \"/{}\"\n", "s".repeat(200)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("grpc.socket"), "{e}");
        let e = parse("[grpc]\nmax_message_bytes = \"4GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("grpc.max_message_bytes"), "{e}");
    }

    #[test]
    fn effective_config_redacts_the_token() {
        let c = parse("api_token = \"s3cret\"\n").unwrap();
        let eff = c.effective();
        assert!(!eff.contains("s3cret"), "{eff}");
        assert!(eff.contains("<redacted>"), "{eff}");
    }

    #[test]
    fn sizes_format_with_the_largest_exact_unit() {
        assert_eq!(format_size(2 << 30), "2GiB");
        assert_eq!(format_size(1536), "1536B");
        assert_eq!(format_size(3 << 20), "3MiB");
        assert_eq!(parse_size(&format_size(5 << 40)).unwrap(), 5 << 40);
    }
}
