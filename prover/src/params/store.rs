//! The parameter directory: one file per circuit kind and size
//! (`chain-1024.params`) with a JSON sidecar (`chain-1024.json`) holding the
//! shape, provenance and SHA-256, and the parameters kept in memory once
//! loaded, counted against the memory budget.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::budget::{BudgetError, MemoryBudget, Reservation};
use crate::circuit::shapes::ShapeCache;
use crate::circuit::{self, CircuitKind, CircuitShape};
use crate::params::error::{io_err, ParamsError};
use crate::params::file::{self, file_sha256, stage, Staged, TempFile};
use crate::params::format::{
    read_mapped, stage_params, stage_streamed, MappedParams, Params, ParamsLayout,
};
use crate::params::read::read_params;
use crate::setup::fixed_base::{CpuFixedBase, FixedBaseEngine};
use crate::setup::{self, TEST_ONLY_WARNING};

/// Version of the sidecar format.
pub const META_FORMAT: u32 = 1;
/// Seed of the TEST-ONLY toxic waste when nobody picked one.
pub const DEFAULT_SEED: u64 = 0;

/// The file's sha256 must be the one its sidecar recorded.
fn same_checksum(path: &Path, expected: &str, actual: String) -> Result<(), ParamsError> {
    if actual == expected {
        return Ok(());
    }
    Err(ParamsError::ChecksumMismatch {
        path: path.to_owned(),
        expected: expected.to_owned(),
        actual,
    })
}

/// Where a cached parameter file came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ParamsOrigin {
    /// Our parallel generator with seeded toxic waste: NOT a trusted setup.
    TestSetup { seed: u64 },
    /// Copied from a file made elsewhere (for example bellperson's generator).
    Imported { from: String },
    /// Handed to the store by a caller.
    Inserted,
}

impl std::fmt::Display for ParamsOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamsOrigin::TestSetup { seed } => write!(f, "test_setup (seed {seed}, TEST-ONLY)"),
            ParamsOrigin::Imported { from } => write!(f, "imported from {from}"),
            ParamsOrigin::Inserted => f.write_str("inserted"),
        }
    }
}

/// The JSON sidecar stored next to each cached parameter file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParamsMeta {
    pub format: u32,
    pub circuit: CircuitKind,
    pub size: usize,
    pub shape: CircuitShape,
    pub domain_size: usize,
    pub layout: ParamsLayout,
    pub sha256: String,
    pub origin: ParamsOrigin,
    pub created_unix_s: u64,
}

/// Whether a store may make up TEST-ONLY parameters for an entry it lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TestParams {
    /// Missing parameters are an error ([`ParamsError::Missing`]).
    #[default]
    Refuse,
    /// Missing parameters are generated from this seed (TEST-ONLY toxic waste).
    Generate { seed: u64 },
}

/// What `params list` reports about one file of the parameter directory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ListedEntry {
    pub circuit: CircuitKind,
    pub size: usize,
    /// The sidecar, when it exists and parses.
    pub meta: Option<ParamsMeta>,
    /// Why the entry would not load as it is (sidecar missing or broken).
    pub problem: Option<String>,
}

struct Loaded {
    params: Arc<Params>,
    /// Held while the parameters stay in memory, so the budget counts them.
    reservation: Option<Reservation>,
    /// When it was last asked for (the store's own counter), for eviction.
    last_used: u64,
}

/// Parameters cached on disk per circuit kind and size, and in memory once loaded.
///
/// A file the store did not write (no sidecar) is never modified or replaced:
/// loading it validates it completely and records a sidecar with origin
/// `imported`, or refuses it with the reason.
pub struct ParamStore {
    root: PathBuf,
    loaded: Mutex<HashMap<(CircuitKind, usize), Loaded>>,
    /// Ticks on every lookup, so eviction can take the least recently used.
    uses: std::sync::atomic::AtomicU64,
    /// Counted circuit shapes, shared with whoever else needs them.
    shapes: Arc<ShapeCache>,
    /// Serialises generation and adoption so two callers asking for the same
    /// entry do the work once.
    generating: Mutex<()>,
    test_params: TestParams,
    /// Sidecars of files validated in a folder this process cannot write:
    /// what [`ParamStore::meta`] answers for them, as a written one would.
    unrecorded: Mutex<HashMap<(CircuitKind, usize), ParamsMeta>>,
    /// Where [`ParamStore::get_or_generate`] runs a generation's fixed-base
    /// multiplications.
    fixed_base: Arc<dyn FixedBaseEngine + Send + Sync>,
    budget: Option<Arc<MemoryBudget>>,
}

impl std::fmt::Debug for ParamStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamStore")
            .field("root", &self.root)
            .field("test_params", &self.test_params)
            .finish()
    }
}

/// Bytes decoded parameters with this layout occupy in memory.
pub fn memory_bytes(layout: &ParamsLayout) -> u64 {
    let g1 = std::mem::size_of::<blstrs::G1Affine>() as u64;
    let g2 = std::mem::size_of::<blstrs::G2Affine>() as u64;
    (layout.ic + layout.h + layout.l + layout.a + layout.b_g1 + 3) * g1 + (layout.b_g2 + 3) * g2
}

fn layout_of(params: &Params) -> ParamsLayout {
    let layout = ParamsLayout {
        ic: params.vk.ic.len() as u64,
        h: params.h.len() as u64,
        l: params.l.len() as u64,
        a: params.a.len() as u64,
        b_g1: params.b_g1.len() as u64,
        b_g2: params.b_g2.len() as u64,
        file_len: 0,
    };
    ParamsLayout {
        file_len: layout.expected_len(),
        ..layout
    }
}

impl ParamStore {
    /// A store rooted at `root`, created if missing, that refuses to generate
    /// parameters and counts nothing against a budget.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, ParamsError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_err(&root, "creating parameter directory"))?;
        Self::open_existing(root)
    }

    /// As [`ParamStore::open`], for readers: a directory that does not
    /// exist is an error, not created (a typo in a path must not leave a
    /// new empty directory behind).
    pub fn open_existing(root: impl Into<PathBuf>) -> Result<Self, ParamsError> {
        let root = root.into();
        if !root.is_dir() {
            return Err(io_err(&root, "opening parameter directory")(
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            ));
        }
        // A write killed half-way (kill -9, a full disk) leaves its temporary
        // file; one whose writer is gone can never be finished.
        match file::remove_dead_temp_files(&root) {
            Ok(removed) => {
                for t in removed {
                    tracing::warn!(path = %t.path.display(), bytes = t.bytes, writer = ?t.writer, "removed the temporary file of a parameter write that never finished");
                }
            }
            Err(e) => tracing::warn!("looking for unfinished parameter writes: {e}"),
        }
        Ok(ParamStore {
            root,
            loaded: Mutex::new(HashMap::new()),
            uses: std::sync::atomic::AtomicU64::new(0),
            shapes: Arc::new(ShapeCache::new()),
            generating: Mutex::new(()),
            test_params: TestParams::Refuse,
            unrecorded: Mutex::new(HashMap::new()),
            fixed_base: Arc::new(CpuFixedBase),
            budget: None,
        })
    }

    /// A store of no directory, that provides no parameters: for an engine
    /// that proves only Filecoin proofs (whose parameters come from
    /// Filecoin's cache), such as a one-shot `prover c2`.
    pub fn empty() -> Self {
        ParamStore {
            root: PathBuf::new(),
            loaded: Mutex::new(HashMap::new()),
            uses: std::sync::atomic::AtomicU64::new(0),
            shapes: Arc::new(ShapeCache::new()),
            generating: Mutex::new(()),
            test_params: TestParams::Refuse,
            unrecorded: Mutex::new(HashMap::new()),
            fixed_base: Arc::new(CpuFixedBase),
            budget: None,
        }
    }

    /// Lets [`ParamStore::get_or_generate`] make up TEST-ONLY parameters.
    pub fn with_test_params(mut self, test_params: TestParams) -> Self {
        self.test_params = test_params;
        self
    }

    /// Runs the fixed-base multiplications of [`ParamStore::get_or_generate`]
    /// on `engine` (a GPU) instead of the CPU: the same files, sooner.
    pub fn with_fixed_base(mut self, engine: Arc<dyn FixedBaseEngine + Send + Sync>) -> Self {
        self.fixed_base = engine;
        self
    }

    /// Reserves every loaded entry's memory in `budget` while it stays loaded.
    pub fn with_budget(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn test_params(&self) -> TestParams {
        self.test_params
    }

    /// The shape of `kind` at `size`, counted once per store.
    pub fn shape(&self, kind: CircuitKind, size: usize) -> Result<CircuitShape, ParamsError> {
        Ok(self.shapes.get(kind, size)?)
    }

    /// The store's shape cache, for admission and synthesis to share.
    pub fn shapes(&self) -> &Arc<ShapeCache> {
        &self.shapes
    }

    /// `<root>/<kind>-<size>.params`
    pub fn params_path(&self, kind: CircuitKind, size: usize) -> PathBuf {
        self.root.join(format!("{kind}-{size}.params"))
    }

    /// `<root>/<kind>-<size>.json`
    pub fn meta_path(&self, kind: CircuitKind, size: usize) -> PathBuf {
        self.root.join(format!("{kind}-{size}.json"))
    }

    /// Whether a parameter file and its sidecar exist (not whether they are valid).
    pub fn contains(&self, kind: CircuitKind, size: usize) -> bool {
        self.params_path(kind, size).is_file() && self.meta_path(kind, size).is_file()
    }

    /// Whether [`ParamStore::get_or_generate`] could find or make `kind`/`size`
    /// without generating being refused (a file is there, or generating is allowed).
    pub fn can_provide(&self, kind: CircuitKind, size: usize) -> bool {
        if self.root.as_os_str().is_empty() {
            return false;
        }
        self.params_path(kind, size).is_file() || self.test_params != TestParams::Refuse
    }

    /// Bytes the entry will occupy once loaded, from its length fields
    /// (`None` when there is no file yet).
    pub fn memory_bytes_of(&self, kind: CircuitKind, size: usize) -> Option<u64> {
        ParamsLayout::read(&self.params_path(kind, size))
            .ok()
            .map(|l| memory_bytes(&l))
    }

    /// Whether `kind`/`size` is in memory.
    pub fn is_loaded(&self, kind: CircuitKind, size: usize) -> bool {
        self.loaded.lock().contains_key(&(kind, size))
    }

    /// Total bytes of the entries loaded in memory (what the budget holds for them).
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded
            .lock()
            .values()
            .map(|l| memory_bytes(&layout_of(&l.params)))
            .sum()
    }

    /// Reads the sidecar of `kind`/`size` and checks it describes that entry.
    pub fn meta(&self, kind: CircuitKind, size: usize) -> Result<ParamsMeta, ParamsError> {
        let path = self.meta_path(kind, size);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(meta) = self.unrecorded.lock().get(&(kind, size)) {
                    return Ok(meta.clone());
                }
                return Err(ParamsError::Missing {
                    dir: self.root.clone(),
                    kind,
                    size,
                });
            }
            Err(e) => return Err(io_err(&path, "reading")(e)),
        };
        let meta: ParamsMeta = serde_json::from_str(&text).map_err(|e| ParamsError::Meta {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if meta.format != META_FORMAT || meta.circuit != kind || meta.size != size {
            return Err(ParamsError::Meta {
                path,
                reason: format!(
                    "describes format {} circuit `{}` size {}, expected format {META_FORMAT} `{kind}` size {size}",
                    meta.format, meta.circuit, meta.size
                ),
            });
        }
        Ok(meta)
    }

    /// Checks the cached file's layout against the circuit and its sidecar,
    /// without decoding points. Does not hash the file.
    fn check_entry(
        &self,
        kind: CircuitKind,
        size: usize,
    ) -> Result<(ParamsMeta, ParamsLayout, PathBuf), ParamsError> {
        let path = self.params_path(kind, size);
        if !path.is_file() || !self.meta_path(kind, size).is_file() {
            return Err(ParamsError::Missing {
                dir: self.root.clone(),
                kind,
                size,
            });
        }
        // The fit comes first: "domain 2^10, needs 2^12" says more than a
        // sidecar that disagrees.
        let layout = ParamsLayout::read(&path)?;
        let shape = self.shape(kind, size)?;
        layout.check_fits(&path, kind, size, &shape)?;
        let meta = self.meta(kind, size)?;
        if layout != meta.layout {
            return Err(ParamsError::Meta {
                path: self.meta_path(kind, size),
                reason: format!(
                    "records layout {:?} but {} has {:?}",
                    meta.layout,
                    path.display(),
                    layout
                ),
            });
        }
        Ok((meta, layout, path))
    }

    /// Full check of a cached entry: sidecar, layout, fit and checksum.
    pub fn verify(&self, kind: CircuitKind, size: usize) -> Result<ParamsMeta, ParamsError> {
        let (meta, _, path) = self.check_entry(kind, size)?;
        let actual = file_sha256(&path)?;
        same_checksum(&path, &meta.sha256, actual)?;
        Ok(meta)
    }

    /// Read-only check of whatever is at `kind`/`size`: an entry with a
    /// sidecar as [`ParamStore::verify`] does, a file without one completely
    /// (every point) as adopting it would, without writing its sidecar.
    /// Returns a description of the origin.
    pub fn verify_any(&self, kind: CircuitKind, size: usize) -> Result<String, ParamsError> {
        let path = self.params_path(kind, size);
        if path.is_file() && !self.meta_path(kind, size).is_file() {
            let shape = self.shape(kind, size)?;
            let (_, _, sha256) = Self::validate(&path, kind, size, &shape)?;
            return Ok(format!(
                "no sidecar yet; valid, {}; sha256 {sha256}",
                self.adoption_note()
            ));
        }
        let meta = self.verify(kind, size)?;
        Ok(match meta.origin {
            ParamsOrigin::TestSetup { seed } => format!("test_setup seed {seed}: TEST-ONLY"),
            ParamsOrigin::Imported { from } => format!("imported from {from}"),
            ParamsOrigin::Inserted => "inserted".into(),
        })
    }

    fn tick(&self) -> u64 {
        self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops loaded parameter sets that nothing else holds (no partition in
    /// flight uses them), least recently used first, until `want` bytes are
    /// available in `budget` or no such set is left. Returns the bytes
    /// freed. A set evicted is loaded again from its file when next asked for.
    pub fn evict_unused(&self, budget: &MemoryBudget, want: u64) -> u64 {
        let mut loaded = self.loaded.lock();
        let mut idle: Vec<((CircuitKind, usize), u64)> = loaded
            .iter()
            .filter(|(_, l)| Arc::strong_count(&l.params) == 1)
            .map(|(k, l)| (*k, l.last_used))
            .collect();
        idle.sort_by_key(|(_, used)| *used);
        let mut freed = 0;
        for (key, _) in idle {
            if budget.available() >= want {
                break;
            }
            if let Some(l) = loaded.remove(&key) {
                let bytes = l.reservation.as_ref().map_or(0, Reservation::bytes);
                freed += bytes;
                tracing::info!(circuit = %key.0, size = key.1, bytes, "evicted an unused parameter set: memory is short");
            }
        }
        freed
    }

    /// Reserves `bytes` in `budget` for `who`: at once when there is room,
    /// else after evicting unused parameter sets, else waiting like any
    /// other reservation.
    pub fn reserve_evicting(
        &self,
        budget: &Arc<MemoryBudget>,
        who: &str,
        bytes: u64,
    ) -> Result<Reservation, BudgetError> {
        match budget.try_reserve(who, bytes) {
            Err(BudgetError::WouldBlock { .. }) => {}
            other => return other,
        }
        if self.evict_unused(budget, bytes) > 0 {
            if let Ok(r) = budget.try_reserve(who, bytes) {
                return Ok(r);
            }
        }
        budget.reserve(who, bytes)
    }

    /// Keeps `params` in memory for `kind`/`size`, reserving their memory in
    /// the budget first (waiting for it like a partition would), out of
    /// `held` where the caller already reserved for them (generation).
    fn keep_loaded(
        &self,
        kind: CircuitKind,
        size: usize,
        params: Params,
    ) -> Result<Arc<Params>, ParamsError> {
        self.keep_loaded_from(kind, size, params, None)
    }

    fn keep_loaded_from(
        &self,
        kind: CircuitKind,
        size: usize,
        params: Params,
        held: Option<Reservation>,
    ) -> Result<Arc<Params>, ParamsError> {
        let budget_err = |source| ParamsError::Budget {
            path: self.params_path(kind, size),
            source,
        };
        let reservation = match &self.budget {
            None => None,
            Some(budget) => {
                let bytes = memory_bytes(&layout_of(&params));
                let who = format!("parameters {kind}/{size}");
                Some(match held {
                    Some(mut r) if r.bytes() >= bytes => {
                        r.release_partial(r.bytes() - bytes).map_err(budget_err)?;
                        r
                    }
                    Some(mut r) => {
                        let more = self
                            .reserve_evicting(budget, &who, bytes - r.bytes())
                            .map_err(budget_err)?;
                        r.merge(more);
                        r
                    }
                    None => self
                        .reserve_evicting(budget, &who, bytes)
                        .map_err(budget_err)?,
                })
            }
        };
        let params = Arc::new(params);
        let mut loaded = self.loaded.lock();
        // Someone else may have loaded it meanwhile: keep theirs, drop ours
        // (and with it our reservation).
        if let Some(l) = loaded.get(&(kind, size)) {
            return Ok(l.params.clone());
        }
        loaded.insert(
            (kind, size),
            Loaded {
                params: params.clone(),
                reservation,
                last_used: self.tick(),
            },
        );
        Ok(params)
    }

    fn warn_if_test_only(&self, kind: CircuitKind, size: usize, origin: &ParamsOrigin) {
        if let ParamsOrigin::TestSetup { seed } = origin {
            tracing::warn!(circuit = %kind, size, seed, "{TEST_ONLY_WARNING}");
        }
    }

    /// Loads `kind`/`size` into memory (once; later calls share it), checking
    /// layout, fit and checksum. Points are decoded unchecked: the checksum
    /// proves the file is the one validated when its sidecar was written.
    /// A file without a sidecar is adopted first ([`ParamStore::adopt`]).
    pub fn load(&self, kind: CircuitKind, size: usize) -> Result<Arc<Params>, ParamsError> {
        if let Some(l) = self.loaded.lock().get_mut(&(kind, size)) {
            l.last_used = self.tick();
            return Ok(l.params.clone());
        }
        if self.params_path(kind, size).is_file() && !self.meta_path(kind, size).is_file() {
            let _adopting = self.generating.lock();
            if !self.meta_path(kind, size).is_file() {
                let (meta, params) = self.adopt(kind, size)?;
                self.warn_if_test_only(kind, size, &meta.origin);
                return self.keep_loaded(kind, size, params);
            }
        }
        let (meta, _, path) = self.check_entry(kind, size)?;
        let (params, _, actual) = match read_params(&path, false) {
            Ok(read) => read,
            // A bad point in a file whose layout is intact: say it is corrupt
            // (checksum) rather than only which point failed to decode.
            Err(err @ ParamsError::Malformed { .. }) => {
                same_checksum(&path, &meta.sha256, file_sha256(&path)?)?;
                return Err(err);
            }
            Err(err) => return Err(err),
        };
        same_checksum(&path, &meta.sha256, actual)?;
        self.warn_if_test_only(kind, size, &meta.origin);
        self.keep_loaded(kind, size, params)
    }

    /// Maps `kind`/`size` after checking sidecar, layout, fit and checksum.
    pub fn load_mapped(&self, kind: CircuitKind, size: usize) -> Result<MappedParams, ParamsError> {
        let meta = self.verify(kind, size)?;
        let path = self.params_path(kind, size);
        let (mapped, layout) = read_mapped(&path, false)?;
        if layout != meta.layout {
            return Err(ParamsError::Malformed {
                path,
                reason: "the file changed while it was being mapped".into(),
            });
        }
        Ok(mapped)
    }

    /// Validates a file found in the directory without a sidecar (format,
    /// domain, shape, every point on the curve and in the subgroup) and
    /// records a sidecar for it with origin `imported`. The file itself is
    /// only read.
    pub fn adopt(
        &self,
        kind: CircuitKind,
        size: usize,
    ) -> Result<(ParamsMeta, Params), ParamsError> {
        let path = self.params_path(kind, size);
        let refuse = |reason: ParamsError| ParamsError::NotAdopted {
            path: path.clone(),
            reason: Box::new(reason),
        };
        let shape = self.shape(kind, size)?;
        let (params, layout, sha256) = Self::validate(&path, kind, size, &shape).map_err(refuse)?;
        let origin = ParamsOrigin::Imported {
            from: format!("{} (found without a sidecar)", path.display()),
        };
        // A folder this process cannot write (a read-only mount, a shared
        // cache owned by another user): the file is just as valid, only its
        // sidecar cannot be recorded, so it is validated again next time.
        if !crate::sys::disk::writable(&self.root) {
            let meta = Self::new_meta(kind, size, shape, layout, sha256, origin);
            tracing::warn!(circuit = %kind, size, path = %path.display(), sha256 = %meta.sha256, "using a parameter file found without a sidecar in a folder this process cannot write: validated in full on every load until a sidecar can be recorded");
            self.unrecorded.lock().insert((kind, size), meta.clone());
            return Ok((meta, params));
        }
        let meta = self.write_meta(kind, size, shape, layout, sha256, origin)?;
        tracing::info!(circuit = %kind, size, path = %path.display(), sha256 = %meta.sha256, "adopted a parameter file found without a sidecar");
        Ok((meta, params))
    }

    /// Everything that can be checked about a file of unknown origin.
    fn validate(
        path: &Path,
        kind: CircuitKind,
        size: usize,
        shape: &CircuitShape,
    ) -> Result<(Params, ParamsLayout, String), ParamsError> {
        ParamsLayout::read(path)?.check_fits(path, kind, size, shape)?;
        read_params(path, true)
    }

    fn write_meta(
        &self,
        kind: CircuitKind,
        size: usize,
        shape: CircuitShape,
        layout: ParamsLayout,
        sha256: String,
        origin: ParamsOrigin,
    ) -> Result<ParamsMeta, ParamsError> {
        let (meta, staged) = self.stage_meta(kind, size, shape, layout, sha256, origin)?;
        staged.commit()?;
        Ok(meta)
    }

    /// The sidecar of a file, made now.
    fn new_meta(
        kind: CircuitKind,
        size: usize,
        shape: CircuitShape,
        layout: ParamsLayout,
        sha256: String,
        origin: ParamsOrigin,
    ) -> ParamsMeta {
        ParamsMeta {
            format: META_FORMAT,
            circuit: kind,
            size,
            shape,
            domain_size: shape.domain_size(),
            layout,
            sha256,
            origin,
            created_unix_s: crate::sys::clock::unix_secs(),
        }
    }

    /// What becomes of a file found without a sidecar, in words
    /// (`params list`, `params verify`).
    fn adoption_note(&self) -> &'static str {
        match crate::sys::disk::writable(&self.root) {
            true => "adopted as `imported` on first use",
            false => "used as found on every load, validated in full each time (this process cannot write the folder, so no sidecar is recorded)",
        }
    }

    /// The sidecar for a file, written in full beside its place.
    fn stage_meta(
        &self,
        kind: CircuitKind,
        size: usize,
        shape: CircuitShape,
        layout: ParamsLayout,
        sha256: String,
        origin: ParamsOrigin,
    ) -> Result<(ParamsMeta, Staged), ParamsError> {
        let meta = Self::new_meta(kind, size, shape, layout, sha256, origin);
        let meta_path = self.meta_path(kind, size);
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| ParamsError::Meta {
            path: meta_path.clone(),
            reason: e.to_string(),
        })?;
        let ((), staged) = stage(&meta_path, |w| w.write_all(&json))?;
        Ok((meta, staged))
    }

    /// Puts a file and its sidecar in place as one: both are already written
    /// in full; the sidecar goes first, so a crash between the renames leaves
    /// a sidecar without its file (the entry is missing, and made again), never
    /// a file without its sidecar (which would be adopted as `imported`).
    fn commit_entry(file: Staged, meta: Staged) -> Result<(), ParamsError> {
        meta.commit()?;
        file.commit()
    }

    /// Temporary files of unfinished writes in the directory (a live
    /// writer's are under way; a dead one's are removed at the next open).
    pub fn temp_files(&self) -> Result<Vec<TempFile>, ParamsError> {
        file::temp_files(&self.root)
    }

    /// Refuses to go on when the entry's file is one the store must not
    /// replace: a file without a sidecar, or one not generated by the store
    /// (unless `replace_imported`).
    fn check_replaceable(
        &self,
        kind: CircuitKind,
        size: usize,
        replace_imported: bool,
    ) -> Result<(), ParamsError> {
        let path = self.params_path(kind, size);
        if !path.exists() {
            return Ok(());
        }
        let protected = |why: String| ParamsError::Protected {
            path: path.clone(),
            why,
        };
        match self.meta(kind, size) {
            Ok(meta) => match meta.origin {
                // A sidecar is only believed about the file it describes: a
                // copied or stale one must not make a foreign file replaceable.
                ParamsOrigin::TestSetup { .. } | ParamsOrigin::Inserted => {
                    let actual = file_sha256(&path)?;
                    if actual != meta.sha256 {
                        return Err(protected(format!(
                            "its sidecar {} records sha256 {} but the file's is {actual}: the sidecar is not this file's, so nothing says the store wrote it",
                            self.meta_path(kind, size).display(),
                            meta.sha256
                        )));
                    }
                    Ok(())
                }
                _ if replace_imported => Ok(()),
                origin => Err(protected(format!("its sidecar records origin {origin}"))),
            },
            Err(ParamsError::Missing { .. }) => Err(protected("it has no sidecar".into())),
            Err(e) => Err(protected(format!("its sidecar is unreadable: {e}"))),
        }
    }

    /// Writes `params` as the entry for `kind`/`size` (file first, then the
    /// sidecar, each atomically), after checking they fit the circuit. Only
    /// an absent entry or one the store wrote from memory (origin
    /// `test_setup` or `inserted`) is replaced.
    pub fn insert(
        &self,
        kind: CircuitKind,
        size: usize,
        params: &Params,
        origin: ParamsOrigin,
    ) -> Result<ParamsMeta, ParamsError> {
        let shape = self.shape(kind, size)?;
        let path = self.params_path(kind, size);
        layout_of(params).check_fits(&path, kind, size, &shape)?;
        self.check_replaceable(kind, size, false)?;
        let staged = stage_params(&path, params)?;
        self.insert_staged(kind, size, params, staged, origin)
    }

    /// Puts `staged`, the file of `params`, in place with its sidecar.
    fn insert_staged(
        &self,
        kind: CircuitKind,
        size: usize,
        params: &Params,
        staged: Staged,
        origin: ParamsOrigin,
    ) -> Result<ParamsMeta, ParamsError> {
        let shape = self.shape(kind, size)?;
        let path = self.params_path(kind, size);
        let layout = layout_of(params);
        layout.check_fits(&path, kind, size, &shape)?;
        self.check_replaceable(kind, size, false)?;
        self.loaded.lock().remove(&(kind, size));
        if staged.bytes != layout.file_len {
            return Err(ParamsError::Malformed {
                path,
                reason: format!("wrote {} bytes, expected {}", staged.bytes, layout.file_len),
            });
        }
        let sha256 = staged.sha256.clone();
        let (meta, staged_meta) = self.stage_meta(kind, size, shape, layout, sha256, origin)?;
        Self::commit_entry(staged, staged_meta)?;
        Ok(meta)
    }

    /// Copies a parameter file made elsewhere (a ceremony, bellperson's
    /// generator) into the store byte for byte, after checking every point.
    /// A file already at the entry's own path is adopted in place. An
    /// existing imported entry is replaced only with `replace`; a file
    /// without a sidecar never.
    pub fn import(
        &self,
        kind: CircuitKind,
        size: usize,
        from: &Path,
        replace: bool,
    ) -> Result<ParamsMeta, ParamsError> {
        let shape = self.shape(kind, size)?;
        let dest = self.params_path(kind, size);
        let same_file = match (fs::canonicalize(from), fs::canonicalize(&dest)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let _importing = self.generating.lock();
        if same_file {
            if let Ok(meta) = self.verify(kind, size) {
                return Ok(meta);
            }
            return self.adopt(kind, size).map(|(meta, _)| meta);
        }
        // The hints of a mismatch name the folder of the file checked, here
        // the source's: for an import only the mismatch itself helps.
        let (_, layout, sha256) =
            Self::validate(from, kind, size, &shape).map_err(|e| match e {
                ParamsError::DomainMismatch {
                    path,
                    have_log2,
                    need_log2,
                    ..
                } => ParamsError::ImportMismatch {
                    path,
                    kind,
                    size,
                    what: format!("its domain is 2^{have_log2}, the circuit needs 2^{need_log2}"),
                },
                ParamsError::ShapeMismatch { path, what, .. } => ParamsError::ImportMismatch {
                    path,
                    kind,
                    size,
                    what,
                },
                e => e,
            })?;
        self.check_replaceable(kind, size, replace)?;
        self.loaded.lock().remove(&(kind, size));
        let mut source = File::open(from).map_err(io_err(from, "opening"))?;
        let ((), staged) = stage(&dest, |w| io::copy(&mut source, w).map(drop))?;
        if staged.sha256 != sha256 || staged.bytes != layout.file_len {
            return Err(ParamsError::Malformed {
                path: from.to_path_buf(),
                reason: "the file changed while it was being imported".into(),
            });
        }
        let (meta, staged_meta) = self.stage_meta(
            kind,
            size,
            shape,
            layout,
            sha256,
            ParamsOrigin::Imported {
                from: from.display().to_string(),
            },
        )?;
        Self::commit_entry(staged, staged_meta)?;
        Ok(meta)
    }

    /// Generates TEST-ONLY parameters for `kind`/`size` from `seed` and stores
    /// them, replacing only an absent entry or an earlier TEST-ONLY one.
    pub fn generate_test(
        &self,
        kind: CircuitKind,
        size: usize,
        seed: u64,
    ) -> Result<(ParamsMeta, Params), ParamsError> {
        self.generate_test_on(kind, size, seed, &CpuFixedBase)
    }

    /// [`ParamStore::generate_test`] with the fixed-base multiplications on
    /// `engine` (the file is the same whichever engine makes it). The set is
    /// written through a buffered writer point by point, in bellperson's
    /// format, straight from the generated vectors: never a second copy.
    pub fn generate_test_on(
        &self,
        kind: CircuitKind,
        size: usize,
        seed: u64,
        engine: &dyn FixedBaseEngine,
    ) -> Result<(ParamsMeta, Params), ParamsError> {
        self.check_replaceable(kind, size, false)?;
        tracing::warn!(circuit = %kind, size, seed, engine = engine.name(), "generating parameters: {TEST_ONLY_WARNING}");
        // The disk before minutes of work, for the daemon's generation as
        // for `prover setup`: a full disk would only show at the end.
        let need = file_bytes_bound(&self.shape(kind, size)?);
        let free = crate::sys::disk::available_bytes(&self.root)
            .map_err(io_err(&self.root, "reading the free space of"))?;
        if need > free {
            return Err(ParamsError::NoSpace {
                dir: self.root.clone(),
                kind,
                size,
                need,
                free,
            });
        }
        let circuit = circuit::shape_circuit(kind, size)?;
        let path = self.params_path(kind, size);
        // Written while it is made: each part goes to disk while the next
        // is computed.
        let (generated, staged) = stage_streamed(&path, |emit| {
            setup::generate_streaming(&circuit, seed, engine, emit)
        });
        match (generated, staged) {
            (Err(setup::SetupError::WriterStopped), Err(write)) | (Ok(_), Err(write)) => Err(write),
            (Err(source), _) => Err(ParamsError::Generate { kind, size, source }),
            (Ok(params), Ok(staged)) => {
                let origin = ParamsOrigin::TestSetup { seed };
                let meta = self.insert_staged(kind, size, &params, staged, origin)?;
                Ok((meta, params))
            }
        }
    }

    /// Loads `kind`/`size`; when the directory has no file for it and the
    /// store was opened with [`TestParams::Generate`], generates TEST-ONLY
    /// parameters, stores them and logs the TEST-ONLY warning. A file that
    /// is there but invalid is never regenerated over.
    pub fn get_or_generate(
        &self,
        kind: CircuitKind,
        size: usize,
    ) -> Result<Arc<Params>, ParamsError> {
        match self.load(kind, size) {
            Err(ParamsError::Missing { .. }) if !self.params_path(kind, size).exists() => {}
            other => return other,
        }
        let TestParams::Generate { seed } = self.test_params else {
            return Err(ParamsError::Missing {
                dir: self.root.clone(),
                kind,
                size,
            });
        };
        let _generating = self.generating.lock();
        // Someone may have generated them while we waited.
        match self.load(kind, size) {
            Err(ParamsError::Missing { .. }) if !self.params_path(kind, size).exists() => {}
            other => return other,
        }
        // Generation holds the set and its working vectors in memory for a
        // while: it is admitted by the budget like any other use.
        let held = match &self.budget {
            None => None,
            Some(budget) => {
                let bytes = generation_bytes(&self.shape(kind, size)?);
                let who = format!("generating parameters {kind}/{size}");
                Some(
                    self.reserve_evicting(budget, &who, bytes)
                        .map_err(|source| ParamsError::Budget {
                            path: self.params_path(kind, size),
                            source,
                        })?,
                )
            }
        };
        let (_, params) = self.generate_test_on(kind, size, seed, &*self.fixed_base)?;
        self.keep_loaded_from(kind, size, params, held)
    }

    /// Every `<kind>-<size>.params` file in the directory, sorted, with its
    /// sidecar or why it has none.
    pub fn list(&self) -> Result<Vec<ListedEntry>, ParamsError> {
        let mut entries = Vec::new();
        let dir = fs::read_dir(&self.root).map_err(io_err(&self.root, "listing"))?;
        for entry in dir {
            let entry = entry.map_err(io_err(&self.root, "listing"))?;
            let name = entry.file_name();
            let Some((kind, size)) = name.to_str().and_then(parse_entry_name) else {
                continue;
            };
            let (meta, problem) = match self.meta(kind, size) {
                Ok(meta) => (Some(meta), None),
                Err(ParamsError::Missing { .. }) => (
                    None,
                    Some(format!(
                        "no sidecar: validated and {}",
                        self.adoption_note()
                    )),
                ),
                Err(e) => (None, Some(e.to_string())),
            };
            entries.push(ListedEntry {
                circuit: kind,
                size,
                meta,
                problem,
            });
        }
        entries.sort_by_key(|e| (e.circuit, e.size));
        Ok(entries)
    }
}

/// An upper bound of the memory generating a set for `shape` holds: the
/// decoded set at its largest (every variable in the A and B queries) and
/// the generator's vectors of scalars (the QAP polynomials at tau per
/// variable, the powers of tau over the domain).
pub fn generation_bytes(shape: &CircuitShape) -> u64 {
    let variables = (shape.num_inputs + shape.num_aux) as u64;
    let domain = shape.domain_size() as u64;
    let scalar = std::mem::size_of::<blstrs::Scalar>() as u64;
    memory_bytes(&largest_layout(shape)) + scalar * (3 * variables + 2 * domain)
}

/// The largest parameter file a circuit of `shape` can have (A and B with
/// no point at infinity left out): what a generation must find free on disk.
pub fn file_bytes_bound(shape: &CircuitShape) -> u64 {
    largest_layout(shape).expected_len()
}

fn largest_layout(shape: &CircuitShape) -> ParamsLayout {
    let variables = (shape.num_inputs + shape.num_aux) as u64;
    ParamsLayout {
        ic: shape.num_inputs as u64,
        h: (shape.domain_size() as u64).saturating_sub(1),
        l: shape.num_aux as u64,
        a: variables,
        b_g1: variables,
        b_g2: variables,
        file_len: 0,
    }
}

/// `chain-1024.params` -> (chain, 1024).
fn parse_entry_name(name: &str) -> Option<(CircuitKind, usize)> {
    let stem = name.strip_suffix(".params")?;
    let (kind, size) = stem.rsplit_once('-')?;
    let kind: CircuitKind = kind.parse().ok()?;
    // Only canonical names: `chain-01024` is not the entry `chain-1024`.
    let size: usize = size.parse().ok()?;
    (size.to_string() == size_str(stem)).then_some((kind, size))
}

fn size_str(stem: &str) -> &str {
    stem.rsplit_once('-').map(|(_, s)| s).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_parse_only_in_canonical_form() {
        assert_eq!(
            parse_entry_name("chain-1024.params"),
            Some((CircuitKind::Chain, 1024))
        );
        assert_eq!(parse_entry_name("chain-01024.params"), None);
        assert_eq!(parse_entry_name("chain-1024.json"), None);
        assert_eq!(parse_entry_name("Chain-1024.params"), None);
    }

    #[test]
    fn a_set_written_while_it_is_generated_has_bellpersons_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ParamStore::open(dir.path()).expect("store");
        let (meta, params) = store
            .generate_test(CircuitKind::Chain, 1024, 4)
            .expect("generate");
        let mut theirs = Vec::new();
        params.write(&mut theirs).expect("bellperson writes");
        let ours = fs::read(store.params_path(CircuitKind::Chain, 1024)).expect("read");
        assert!(
            ours == theirs,
            "the streamed file differs from bellperson's bytes"
        );
        assert_eq!(
            meta.sha256,
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&ours))
        );
        let loaded = store.load(CircuitKind::Chain, 1024).expect("loads");
        assert!(*loaded == params, "what loads is not what was generated");
    }

    #[test]
    fn a_generation_that_fails_leaves_no_file() {
        // A circuit whose QAP cannot be evaluated stops generation after
        // the writer started: nothing of it may stay in the directory.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("chain-64.params");
        let (generated, staged) = stage_streamed(&path, |emit| {
            emit(setup::SetPart::G1(Arc::new(vec![
                <blstrs::G1Affine as group::prime::PrimeCurveAffine>::generator(),
            ])));
            Err::<(), _>("generation failed")
        });
        assert_eq!(generated, Err("generation failed"));
        drop(staged);
        let left: Vec<_> = fs::read_dir(dir.path()).expect("list").collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
