//! A Filecoin proof checked against its inputs and ready to be proven one
//! partition at a time. The command line's loop ([`prove_all`]) and the
//! daemon's pipeline both take a [`Statement`], so neither needs the proof
//! crates' types (the merkle tree shape of the sector size stays inside).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bellperson::groth16::{prepare_verifying_key, verify_proof};
use blstrs::Scalar;
use fleet_wire::api::FilecoinKind;

use crate::backend::{Backend, BackendTimes};
use crate::circuit::{CircuitShape, SplitWitness};
use crate::compiled::CompiledR1cs;
use crate::filecoin::cache::{CacheEntry, Loaded};
use crate::filecoin::FilecoinError;
use crate::pool::PinnedPool;
use crate::prove::{self, IdentifiedKey};
use crate::synthesis::Synthesized;

/// Bytes of one Groth16 proof in Filecoin's (bellperson's compressed) encoding.
pub const PROOF_BYTES: usize = 192;

/// A checked Filecoin proof: its inputs verified (replica id, vanilla
/// proofs), its partitions' circuits built on demand.
pub trait Statement: Send + Sync {
    fn kind(&self) -> FilecoinKind;
    fn sector_size(&self) -> u64;
    /// The parameter file that proves it, in `cache_dir`.
    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError>;
    /// Groth16 proofs it takes.
    fn partitions(&self) -> usize;
    /// Sectors it proves something of.
    fn sectors(&self) -> usize {
        1
    }
    /// Partition `k`'s number in the proof's own numbering (a WindowPoSt
    /// partition keeps its index in the deadline).
    fn partition_number(&self, k: usize) -> usize {
        k
    }
    /// Builds partition `k`'s circuit and synthesises it into `pool` as
    /// `mode` says.
    fn synthesize(
        &self,
        k: usize,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, FilecoinError>;
}

/// How a partition is synthesised. Every partition of one parameter set has
/// the same constraints (the parameters encode them), so one partition's
/// recording serves the others.
#[derive(Clone, Copy)]
pub enum Mode<'a> {
    /// The bellperson way.
    Plain,
    /// Record the constraints from this partition's circuit, then synthesise
    /// from the recording (checked); the recording comes back in the
    /// [`Partition`].
    Record,
    /// From an earlier partition's recording; with `defer_abc` (and
    /// unchecked) a, b, c are left to the backend, which computes them on
    /// its device ([`crate::synthesis::synthesize_witness_split`]).
    Compiled {
        r1cs: &'a Arc<CompiledR1cs>,
        check: bool,
        defer_abc: bool,
    },
}

/// One partition, synthesised.
pub struct Partition {
    pub syn: Synthesized,
    /// The public inputs a verifier computes for it.
    pub inputs: Vec<Scalar>,
    /// Building the circuit (before synthesis), ms.
    pub circuit_ms: f64,
    /// What [`Mode::Record`] recorded.
    pub recorded: Option<CompiledR1cs>,
}

impl Partition {
    /// Synthesises partition `k`'s built `circuit` into `pool` as `mode`
    /// says; `started` is when building it began.
    pub fn synthesize<C: bellperson::Circuit<Scalar> + Clone>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, FilecoinError> {
        let circuit_ms = ms(started);
        let failed = |source: crate::synthesis::SynthesisError| FilecoinError::Prove {
            partition: k,
            source: source.into(),
        };
        let mut recorded = None;
        let syn = match mode {
            Mode::Plain => crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?,
            Mode::Compiled { r1cs, check, .. } => {
                crate::synthesis::synthesize_compiled(circuit, r1cs, shape, pool, check)
                    .map_err(failed)?
            }
            // A circuit that cannot be recorded is still proved, the
            // bellperson way; only the recording is given up.
            Mode::Record => match crate::compiled::compile(circuit.clone()) {
                Ok(r1cs) => {
                    let syn =
                        crate::synthesis::synthesize_compiled(circuit, &r1cs, shape, pool, true)
                            .map_err(failed)?;
                    recorded = Some(r1cs);
                    syn
                }
                Err(e) => {
                    tracing::warn!("partition {k}: {e}; synthesising the bellperson way");
                    crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?
                }
            },
        };
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded,
        })
    }

    /// Synthesises partition `k` from `r1cs`, unchecked, with the witness
    /// pass in `circuit`'s pieces on every core (see
    /// [`crate::circuit::SplitWitness`]).
    #[allow(clippy::too_many_arguments)]
    pub fn synthesize_split<C: SplitWitness>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        pool: &PinnedPool,
        r1cs: &Arc<CompiledR1cs>,
        defer_abc: bool,
    ) -> Result<Partition, FilecoinError> {
        let circuit_ms = ms(started);
        let syn = if defer_abc {
            crate::synthesis::synthesize_witness_split(circuit, r1cs, shape, pool, false)
        } else {
            crate::synthesis::synthesize_compiled_split(circuit, r1cs, shape, pool, false)
        }
        .map_err(|source| FilecoinError::Prove {
            partition: k,
            source: source.into(),
        })?;
        if let Some(parts) = syn.parts {
            tracing::info!(
                partition = k,
                pieces = parts.pieces,
                witness_ms = parts.witness_ms,
                "witness pass in pieces"
            );
        }
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded: None,
        })
    }
}

/// What one partition took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionReport {
    pub partition: usize,
    pub constraints: usize,
    pub domain_log2: u32,
    pub aux: usize,
    pub circuit_ms: f64,
    pub synthesis_ms: f64,
    /// Of `synthesis_ms`, where it ran from compiled constraints.
    pub witness_ms: Option<f64>,
    pub abc_ms: Option<f64>,
    pub prove_ms: f64,
    pub device_ms: f64,
    pub verify_ms: f64,
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Proves every partition of `statement` in order with `loaded` on
/// `backend`, verifying each proof against the parameters' verifying key.
/// Returns the proofs concatenated as filecoin-proofs lays them out.
///
/// Synthesis of one partition is single-threaded and takes longer than its
/// proof, so later partitions are synthesised on threads of their own while
/// the earlier ones are proved, as many ahead as [`synthesis_ahead`]
/// allows. Partition 0 goes first on its own: its recording of the
/// constraints serves the others.
pub fn prove_all(
    statement: &dyn Statement,
    loaded: &Loaded,
    backend: &dyn Backend,
    pool: &PinnedPool,
    seed: Option<u64>,
    compiled: bool,
) -> Result<(Vec<u8>, Vec<PartitionReport>), FilecoinError> {
    let pvk = prepare_verifying_key(&loaded.params.vk);
    let key = IdentifiedKey {
        key: &loaded.params,
        sha256: &loaded.sha256,
    };
    let shape = prove::shape_of_key(&key);
    let blinding = prove::Blinding::from_seed(seed);
    let partitions = statement.partitions();
    let mut proof_bytes = Vec::with_capacity(partitions * PROOF_BYTES);
    let mut reports = Vec::with_capacity(partitions);
    let mut prove_one = |k: usize, part: Partition| -> Result<(), FilecoinError> {
        let Partition {
            syn,
            inputs,
            circuit_ms,
            ..
        } = part;
        let (constraints, synthesis_ms, parts) = (syn.num_constraints, syn.synthesis_ms, syn.parts);
        let (r, s) = blinding.for_partition(k as u32);
        let t = Instant::now();
        let mut times = BackendTimes::default();
        let proof =
            prove::prove_synthesized(backend, &key, syn, r, s, &mut times).map_err(|source| {
                FilecoinError::Prove {
                    partition: k,
                    source,
                }
            })?;
        let prove_ms = ms(t);
        let t = Instant::now();
        if !verify_proof(&pvk, &proof, &inputs).unwrap_or(false) {
            return Err(FilecoinError::ProofRejected { partition: k });
        }
        let verify_ms = ms(t);
        // Writing into a Vec cannot fail.
        let _ = proof.write(&mut proof_bytes);
        reports.push(PartitionReport {
            partition: statement.partition_number(k),
            constraints,
            domain_log2: shape.log2_domain(),
            aux: shape.num_aux,
            circuit_ms,
            synthesis_ms,
            witness_ms: parts.map(|p| p.witness_ms),
            abc_ms: parts.map(|p| p.abc_ms),
            prove_ms,
            device_ms: times.device_ms,
            verify_ms,
        });
        Ok(())
    };

    if partitions == 0 {
        return Ok((proof_bytes, reports));
    }
    // Recording costs about one more synthesis: it pays only where later
    // partitions use it.
    let first_mode = if compiled && partitions > 1 {
        Mode::Record
    } else {
        Mode::Plain
    };
    let mut first = statement.synthesize(0, &shape, pool, first_mode)?;
    let recording = first.recorded.take().map(Arc::new);
    // Each proof is verified, so a partition that strayed from the
    // recording cannot pass unnoticed.
    let rest_mode = match &recording {
        Some(r1cs) => Mode::Compiled {
            r1cs,
            check: false,
            defer_abc: backend.abc_off_host(shape.domain_size()),
        },
        None => Mode::Plain,
    };
    let ahead = synthesis_ahead(partitions, &shape, pool);
    if partitions > 1 {
        tracing::info!(
            partitions,
            ahead,
            "later partitions synthesised while earlier ones are proved"
        );
    }
    if ahead == 0 {
        prove_one(0, first)?;
        for k in 1..partitions {
            let part = statement.synthesize(k, &shape, pool, rest_mode)?;
            prove_one(k, part)?;
        }
        return Ok((proof_bytes, reports));
    }
    let shape = &shape;
    std::thread::scope(|scope| {
        // Worker w synthesises partitions 1 + w, 1 + w + ahead, ...; its
        // rendezvous channel holds it until that partition is taken, so at
        // most `ahead` synthesised partitions wait beside the one proved.
        let mut receivers = Vec::with_capacity(ahead);
        let mut workers = Vec::with_capacity(ahead);
        for w in 0..ahead {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Partition, FilecoinError>>(0);
            receivers.push(rx);
            workers.push(scope.spawn(move || {
                for k in (1 + w..partitions).step_by(ahead) {
                    let part = statement.synthesize(k, shape, pool, rest_mode);
                    let failed = part.is_err();
                    // A closed channel: the prover stopped at an error.
                    if tx.send(part).is_err() || failed {
                        break;
                    }
                }
            }));
        }
        let mut proved = prove_one(0, first);
        for k in 1..partitions {
            if proved.is_err() {
                break;
            }
            proved = match receivers[(k - 1) % ahead].recv() {
                Ok(part) => part.and_then(|p| prove_one(k, p)),
                Err(_) => Err(FilecoinError::SynthesisPanicked { partition: k }),
            };
        }
        // Unblocks workers waiting to hand over a partition no one takes.
        drop(receivers);
        let mut panicked = None;
        for (w, worker) in workers.into_iter().enumerate() {
            if worker.join().is_err() {
                panicked.get_or_insert(1 + w);
            }
        }
        match (proved, panicked) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(partition)) => Err(FilecoinError::SynthesisPanicked { partition }),
            (Ok(()), None) => Ok(()),
        }
    })?;
    Ok((proof_bytes, reports))
}

/// How many partitions may be synthesised ahead of the one being proved:
/// one per core beside the proving thread, and no more than the pool's
/// budget and the host's available memory hold next to it (each takes
/// [`crate::synthesis::pool_bytes`]). Zero proves one partition at a time.
pub fn synthesis_ahead(partitions: usize, shape: &CircuitShape, pool: &PinnedPool) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let host = crate::sys::meminfo::read_field("/proc/meminfo", "MemAvailable")
        .ok()
        .flatten()
        .unwrap_or(0);
    ahead_within(
        partitions,
        cores,
        crate::synthesis::pool_bytes(shape),
        pool.budget().available().min(host),
    )
}

/// [`synthesis_ahead`]'s rule on plain numbers.
fn ahead_within(partitions: usize, cores: usize, per_partition: u64, memory: u64) -> usize {
    let fit = usize::try_from(memory / per_partition.max(1)).unwrap_or(usize::MAX);
    partitions
        .saturating_sub(1)
        .min(cores.saturating_sub(1))
        .min(fit.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::circuit::ChainCircuit;
    use crate::filecoin::cache::Provenance;
    use crate::params::ParamsLayout;

    const SIZE: usize = 300;

    /// Partitions that are chain circuits of one size, each from its own
    /// seed; `fail_at` refuses one partition, `panic_at` panics in one.
    struct Chains {
        partitions: usize,
        fail_at: Option<usize>,
        panic_at: Option<usize>,
    }

    impl Statement for Chains {
        fn kind(&self) -> FilecoinKind {
            FilecoinKind::WindowPost
        }
        fn sector_size(&self) -> u64 {
            2048
        }
        fn cache_entry(&self, _: &Path) -> Result<CacheEntry, FilecoinError> {
            Err(FilecoinError::ProofCrates {
                context: "test statement",
                reason: "has no parameter file".into(),
            })
        }
        fn partitions(&self) -> usize {
            self.partitions
        }
        fn synthesize(
            &self,
            k: usize,
            shape: &CircuitShape,
            pool: &PinnedPool,
            mode: Mode<'_>,
        ) -> Result<Partition, FilecoinError> {
            assert_ne!(self.panic_at, Some(k), "partition {k} panics");
            if self.fail_at == Some(k) {
                return Err(FilecoinError::VanillaPostInvalid {
                    reason: format!("partition {k} refused"),
                });
            }
            let circuit = ChainCircuit::from_seed(SIZE, 100 + k as u64);
            let inputs = circuit.public_input().into_iter().collect();
            Partition::synthesize(k, circuit, inputs, Instant::now(), shape, pool, mode)
        }
    }

    fn loaded() -> Loaded {
        let params =
            crate::setup::generate(&ChainCircuit::for_size(SIZE, None), 11).expect("setup");
        Loaded {
            params,
            // prove_all reads neither the file's layout nor its provenance.
            layout: ParamsLayout {
                ic: 0,
                h: 0,
                l: 0,
                a: 0,
                b_g1: 0,
                b_g2: 0,
                file_len: 0,
            },
            provenance: Provenance::TestOnly {
                blake2b: String::new(),
                seed: 11,
            },
            sha256: "test:chains".into(),
        }
    }

    fn chains(partitions: usize) -> Chains {
        Chains {
            partitions,
            fail_at: None,
            panic_at: None,
        }
    }

    #[test]
    fn partitions_synthesised_ahead_give_the_proofs_of_one_at_a_time() {
        let loaded = loaded();
        let backend = CpuBackend::new();
        let key = IdentifiedKey {
            key: &loaded.params,
            sha256: &loaded.sha256,
        };
        let per = crate::synthesis::pool_bytes(&prove::shape_of_key(&key));
        let wide = crate::synthesis::heap_pool(u64::MAX);
        // Room for one partition only: nothing is synthesised ahead.
        let narrow = crate::synthesis::heap_pool(per);
        let statement = chains(5);
        assert_eq!(synthesis_ahead(5, &prove::shape_of_key(&key), &narrow), 0);
        for compiled in [true, false] {
            let (ahead, reports) =
                prove_all(&statement, &loaded, &backend, &wide, Some(3), compiled).expect("ahead");
            let (one, _) =
                prove_all(&statement, &loaded, &backend, &narrow, Some(3), compiled).expect("one");
            assert_eq!(ahead, one, "compiled {compiled}");
            assert_eq!(ahead.len(), 5 * PROOF_BYTES);
            let numbers: Vec<usize> = reports.iter().map(|r| r.partition).collect();
            assert_eq!(numbers, [0, 1, 2, 3, 4]);
            // Partitions 1.. come from partition 0's recording.
            assert_eq!(
                reports.iter().filter(|r| r.witness_ms.is_some()).count(),
                if compiled { 5 } else { 0 }
            );
        }
    }

    #[test]
    fn a_failing_or_panicking_partition_fails_the_statement_naming_it() {
        let loaded = loaded();
        let backend = CpuBackend::new();
        let pool = crate::synthesis::heap_pool(u64::MAX);
        let refused = Chains {
            fail_at: Some(3),
            ..chains(5)
        };
        let err = prove_all(&refused, &loaded, &backend, &pool, Some(3), true).unwrap_err();
        assert!(err.to_string().contains("partition 3 refused"), "{err}");
        // A panic on a synthesis thread (on one core there is none: the
        // partition would be synthesised inline and the panic the test's).
        let key = IdentifiedKey {
            key: &loaded.params,
            sha256: &loaded.sha256,
        };
        if synthesis_ahead(4, &prove::shape_of_key(&key), &pool) > 0 {
            let panics = Chains {
                panic_at: Some(2),
                ..chains(4)
            };
            let err = prove_all(&panics, &loaded, &backend, &pool, Some(3), true).unwrap_err();
            assert!(
                matches!(err, FilecoinError::SynthesisPanicked { partition: 2 }),
                "{err}"
            );
        }
        // Every buffer went back to the pool.
        assert_eq!(pool.stats().buffers_in_use, 0);
    }

    #[test]
    fn a_statement_without_partitions_proves_nothing() {
        let pool = crate::synthesis::heap_pool(u64::MAX);
        let (proof, reports) =
            prove_all(&chains(0), &loaded(), &CpuBackend::new(), &pool, None, true).expect("empty");
        assert!(proof.is_empty() && reports.is_empty());
    }

    #[test]
    fn how_far_ahead_follows_cores_and_memory() {
        // partitions, cores, bytes per partition, memory
        assert_eq!(ahead_within(1, 16, 10, 1000), 0);
        assert_eq!(ahead_within(10, 16, 10, 1000), 9);
        assert_eq!(ahead_within(10, 4, 10, 1000), 3);
        assert_eq!(ahead_within(10, 16, 10, 35), 2);
        assert_eq!(ahead_within(10, 16, 10, 19), 0);
        assert_eq!(ahead_within(10, 1, 10, 1000), 0);
        assert_eq!(ahead_within(10, 16, 0, 0), 0);
    }
}
