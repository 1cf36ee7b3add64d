//! Proof assembly: MSM results and r, s into A, B, C, as bellperson does.
//!
//! With `[x]₁`, `[x]₂` the parameters' points (names as in ARCHITECTURE.md)
//! and the witness split into inputs (ONE first) and aux:
//!
//! - `A = α + Σ aᵢ·[uᵢ] + r·δ` (G1; `params.a`, inputs dense, aux by A-density)
//! - `B = β + Σ bᵢ·[vᵢ] + s·δ` (G2 `params.b_g2`; its G1 twin `params.b_g1` feeds C)
//! - `C = s·A' + r·B'₁ + r·s·δ + s·α + r·β + Σ hᵢ·[τⁱt(τ)/δ] + Σ auxᵢ·[lᵢ]`
//!   where `A'`, `B'₁` are the bare sums: identical to `sA + rB₁ − rsδ + h + l`.
//!
//! The A and B queries hold only the variables with a non-zero coefficient
//! (the densities), inputs first then aux; each query runs as an inputs MSM
//! and an aux MSM over the adjacent runs of bases, with the assignment values
//! gathered only when the density is not full.
//!
//! # Partitions
//! A job of k partitions is k independent proofs of the same circuit and
//! parameters. Partition `i` of a job with seed `seed` uses
//! `(r, s) = partition_randomness(seed, i)`: a ChaCha20 stream keyed by
//! SHA-256(`"fleet-groth16-rs/v1"` ‖ seed as 8 little-endian bytes ‖ i as 4
//! little-endian bytes), from which `r` then `s` are drawn with
//! `Scalar::random` (ff's rejection sampling). Re-proving a partition with the
//! same seed therefore gives byte-identical proofs on every backend.
//!
//! Without a seed ([`Blinding::Os`]) every partition draws r and s straight
//! from the operating system's CSPRNG: the blinding of a production proof is
//! then as strong as the field, not as a 64-bit seed.

use crate::backend::{Backend, BackendError, BackendTimes, BaseQuery, Bases, QuotientFrom};
use crate::circuit::CircuitShape;
use crate::compiled::CompiledR1cs;
use crate::pool::PinnedPool;
use crate::synthesis::{self, Density, SynthesisError, Synthesized};
use bellperson::groth16::{Parameters, Proof, VerifyingKey};
use bellperson::Circuit;
use blstrs::{Bls12, G1Affine, G2Affine, Scalar};
use ff::Field;
use fleet_wire::timing::Phase;
use group::prime::PrimeCurveAffine;
use group::Curve;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sha2::{Digest, Sha256};
use std::time::Instant;

/// Why a partition could not be proven.
#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    #[error(transparent)]
    Synthesis(#[from] SynthesisError),
    #[error("{backend} backend: {source}")]
    Backend {
        backend: &'static str,
        #[source]
        source: BackendError,
    },
    #[error(
        "parameters do not match the synthesized circuit: {what} is {got}, expected {expected}"
    )]
    ParamsMismatch {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("parameters hold the identity as delta (a subverted CRS); refusing to prove")]
    UnexpectedIdentity,
}

/// Read access to a Groth16 proving key, whatever holds it in memory.
pub trait ProvingKey: Sync {
    fn vk(&self) -> &VerifyingKey<Bls12>;
    /// `[τⁱ·t(τ)/δ]₁` for i < m − 1.
    fn h(&self) -> &[G1Affine];
    /// `[(βuᵢ+αvᵢ+wᵢ)/δ]₁` for every aux variable.
    fn l(&self) -> &[G1Affine];
    /// `[uᵢ(τ)]₁`, inputs then dense aux.
    fn a(&self) -> &[G1Affine];
    /// `[vᵢ(τ)]₁`, dense inputs then dense aux.
    fn b_g1(&self) -> &[G1Affine];
    /// `[vᵢ(τ)]₂`, dense inputs then dense aux.
    fn b_g2(&self) -> &[G2Affine];
    /// A name unique to these parameters (the file's SHA-256), under which
    /// a device backend keeps the bases resident; `None` when unknown.
    fn set_id(&self) -> Option<&str> {
        None
    }
}

/// A proving key together with the checksum of the file it came from, so
/// device backends can keep its bases resident across proofs.
pub struct IdentifiedKey<'a> {
    pub key: &'a dyn ProvingKey,
    pub sha256: &'a str,
}

impl ProvingKey for IdentifiedKey<'_> {
    fn vk(&self) -> &VerifyingKey<Bls12> {
        self.key.vk()
    }
    fn h(&self) -> &[G1Affine] {
        self.key.h()
    }
    fn l(&self) -> &[G1Affine] {
        self.key.l()
    }
    fn a(&self) -> &[G1Affine] {
        self.key.a()
    }
    fn b_g1(&self) -> &[G1Affine] {
        self.key.b_g1()
    }
    fn b_g2(&self) -> &[G2Affine] {
        self.key.b_g2()
    }
    fn set_id(&self) -> Option<&str> {
        Some(self.sha256)
    }
}

impl ProvingKey for Parameters<Bls12> {
    fn vk(&self) -> &VerifyingKey<Bls12> {
        &self.vk
    }
    fn h(&self) -> &[G1Affine] {
        &self.h
    }
    fn l(&self) -> &[G1Affine] {
        &self.l
    }
    fn a(&self) -> &[G1Affine] {
        &self.a
    }
    fn b_g1(&self) -> &[G1Affine] {
        &self.b_g1
    }
    fn b_g2(&self) -> &[G2Affine] {
        &self.b_g2
    }
}

/// The largest shape a proving key admits: its input and aux counts, and as
/// many constraints as fill its domain (m = `h.len() + 1`).
pub fn shape_of_key(key: &dyn ProvingKey) -> CircuitShape {
    let m = key.h().len() + 1;
    let num_inputs = key.vk().ic.len();
    CircuitShape {
        num_inputs,
        num_aux: key.l().len(),
        num_constraints: m.saturating_sub(num_inputs),
    }
}

/// Where a partition's blinding factors r, s come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blinding {
    /// Derived from a seed ([`partition_randomness`]): reproducible proofs.
    Seeded(u64),
    /// Drawn from the OS's CSPRNG for each partition (and each retry).
    Os,
}

impl Blinding {
    /// A seed when one was given, else the OS.
    pub fn from_seed(seed: Option<u64>) -> Self {
        seed.map_or(Blinding::Os, Blinding::Seeded)
    }

    /// The (r, s) of partition `partition`.
    pub fn for_partition(self, partition: u32) -> (Scalar, Scalar) {
        match self {
            Blinding::Seeded(seed) => partition_randomness(seed, partition),
            Blinding::Os => {
                let mut os = rand::rngs::OsRng;
                (Scalar::random(&mut os), Scalar::random(&mut os))
            }
        }
    }
}

/// The (r, s) of partition `partition` of a job seeded with `seed` (see the
/// module docs for the derivation).
pub fn partition_randomness(seed: u64, partition: u32) -> (Scalar, Scalar) {
    let mut h = Sha256::new();
    h.update(b"fleet-groth16-rs/v1");
    h.update(seed.to_le_bytes());
    h.update(partition.to_le_bytes());
    let mut rng = ChaCha20Rng::from_seed(h.finalize().into());
    let r = Scalar::random(&mut rng);
    let s = Scalar::random(&mut rng);
    (r, s)
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn check(what: &'static str, got: usize, expected: usize) -> Result<(), ProveError> {
    if got == expected {
        Ok(())
    } else {
        Err(ProveError::ParamsMismatch {
            what,
            got,
            expected,
        })
    }
}

/// `values` at the set positions of `density`, appended to `out`.
fn gather(out: &mut Vec<Scalar>, values: &[Scalar], density: &Density) {
    if density.is_full() {
        out.extend_from_slice(values);
    } else {
        out.extend(
            values
                .iter()
                .enumerate()
                .filter(|(i, _)| density.get(*i))
                .map(|(_, v)| *v),
        );
    }
}

/// `values` itself when every position is set, else the set positions
/// gathered into `scratch`.
fn dense<'a>(
    values: &'a [Scalar],
    density: &Density,
    scratch: &'a mut Vec<Scalar>,
) -> &'a [Scalar] {
    if density.is_full() {
        values
    } else {
        scratch.clear();
        gather(scratch, values, density);
        scratch
    }
}

/// Proves one synthesized partition with randomness `r`, `s`. Buffers go
/// back to the pool as soon as they are no longer needed (b, c after the
/// quotient, a after the h MSM). Backend and MSM phases are added to `times`.
pub fn prove_synthesized(
    backend: &dyn Backend,
    key: &dyn ProvingKey,
    syn: Synthesized,
    r: Scalar,
    s: Scalar,
    times: &mut BackendTimes,
) -> Result<Proof<Bls12>, ProveError> {
    let backend_err = |source| ProveError::Backend {
        backend: backend.kind().as_str(),
        source,
    };
    let vk = key.vk();
    let Synthesized {
        mut a,
        mut b,
        mut c,
        input_assignment,
        aux_assignment,
        a_aux_density,
        b_input_density,
        b_aux_density,
        abc_from,
        ..
    } = syn;
    // a, b, c left to the backend: the domain is the parameters'.
    let m = match &abc_from {
        Some(_) => key.h().len() + 1,
        None => a.len(),
    };
    let num_inputs = input_assignment.len();
    check("the domain size (h query + 1)", key.h().len() + 1, m)?;
    check("the number of inputs (vk.ic)", vk.ic.len(), num_inputs)?;
    check(
        "the number of aux variables (l query)",
        key.l().len(),
        aux_assignment.len(),
    )?;
    let a_len = num_inputs + a_aux_density.total();
    let b_len = b_input_density.total() + b_aux_density.total();
    check("the A query length", key.a().len(), a_len)?;
    check("the B query length in G1", key.b_g1().len(), b_len)?;
    check("the B query length in G2", key.b_g2().len(), b_len)?;
    if bool::from(vk.delta_g1.is_identity() | vk.delta_g2.is_identity()) {
        return Err(ProveError::UnexpectedIdentity);
    }

    let pinned = a.page_locked() && b.page_locked() && c.page_locked();
    let set = key.set_id();
    fn bases<'k, T>(
        query: &'k [T],
        range: std::ops::Range<usize>,
        which: BaseQuery,
        set: Option<&'k str>,
    ) -> Bases<'k, T> {
        Bases::of_query(query, range, set, which)
    }
    // h has m coefficients; the top one is zero for a satisfied system and
    // bellperson drops it, as the h query holds m − 1 points. The h MSM
    // goes with the quotient: a device backend runs it on h where the NTT
    // left it.
    let h_bases = bases(key.h(), 0..m - 1, BaseQuery::H, set);
    if let Some(r1cs) = &abc_from {
        check(
            "the domain of the compiled constraints",
            r1cs.num_constraints.max(1).next_power_of_two(),
            m,
        )?;
        // h may come back in `a`; `b` and `c` are needed where a, b, c are
        // computed on the host.
        let off_host = backend.abc_off_host(m);
        let bufs = [&mut a, &mut b, &mut c];
        for (k, v) in bufs.into_iter().enumerate() {
            v.clear();
            if k == 0 || !off_host {
                v.resize(m, Scalar::ZERO).map_err(|_| {
                    ProveError::from(SynthesisError::TooLarge {
                        what: "domain elements",
                        limit: v.capacity(),
                    })
                })?;
            }
        }
    }

    // Inputs and aux run as two MSMs over adjacent bases (the sum is the
    // same group element) so a fully dense aux assignment is used in place,
    // not copied.
    let b_inputs_len = b_input_density.total();
    let mut b_inputs = Vec::with_capacity(b_inputs_len);
    gather(&mut b_inputs, &input_assignment, &b_input_density);
    let mut scratch_b = Vec::new();
    let b_aux = dense(&aux_assignment, &b_aux_density, &mut scratch_b);
    let mut scratch_a = Vec::new();
    let mut g2_times = BackendTimes::default();
    let ntt_ms = |t: &BackendTimes| t.phases_ms.get(&Phase::NttKernels).copied().unwrap_or(0.0);
    let ntt_before = ntt_ms(times);
    let start = Instant::now();
    let (g1, g2) = std::thread::scope(|scope| {
        // The G2 MSM on its own thread, started before the quotient: on the
        // CPU backend it overlaps the quotient and the G1 MSMs; on a device
        // backend the device runs one call after another, and the thread
        // overlaps its host-side work with the quotient's and the G1 MSMs'
        // device work.
        let g2_times = &mut g2_times;
        let (b_inputs, b_aux) = (&b_inputs, b_aux);
        let g2 = scope.spawn(move || {
            let q = key.b_g2();
            g2_times.measure(Phase::MsmBG2, |t| {
                let inputs =
                    backend.msm_g2(&bases(q, 0..b_inputs_len, BaseQuery::BG2, set), b_inputs, t)?;
                Ok::<_, BackendError>(
                    inputs
                        + backend.msm_g2(
                            &bases(q, b_inputs_len..b_len, BaseQuery::BG2, set),
                            b_aux,
                            t,
                        )?,
                )
            })
        });
        let g1 = (|| {
            let from = match &abc_from {
                None => QuotientFrom::Evaluations {
                    b: &mut b[..],
                    c: &mut c[..],
                },
                Some(r1cs) => QuotientFrom::Compiled {
                    r1cs,
                    inputs: &input_assignment,
                    aux: &aux_assignment,
                    b: &mut b[..],
                    c: &mut c[..],
                },
            };
            let h = backend
                .quotient_then_h_msm(from, &mut a[..], pinned, &h_bases, times)
                .map_err(backend_err)?;
            drop((a, b, c));

            // l and A on threads of their own beside B in G1 here, as the
            // G2 MSM is: on a device backend each MSM's scalar upload then
            // runs while another one's kernels hold the device, and a
            // density gather on the host beside them.
            let ((l, l_times), (a_answer, a_times), b1_answer) = std::thread::scope(|inner| {
                let aux = &aux_assignment[..];
                let l = inner.spawn(move || {
                    let mut t = BackendTimes::default();
                    let l = t.measure(Phase::MsmL, |t| {
                        backend.msm_g1(&bases(key.l(), 0..key.l().len(), BaseQuery::L, set), aux, t)
                    });
                    (l, t)
                });
                let scratch_a = &mut scratch_a;
                let (a_density, inputs) = (&a_aux_density, &input_assignment[..]);
                let a = inner.spawn(move || {
                    let mut t = BackendTimes::default();
                    let a = t.measure(Phase::MsmA, |t| {
                        let a_aux = dense(aux, a_density, scratch_a);
                        let from_inputs = backend.msm_g1(
                            &bases(key.a(), 0..num_inputs, BaseQuery::A, set),
                            inputs,
                            t,
                        )?;
                        Ok::<_, BackendError>(
                            from_inputs
                                + backend.msm_g1(
                                    &bases(key.a(), num_inputs..a_len, BaseQuery::A, set),
                                    a_aux,
                                    t,
                                )?,
                        )
                    });
                    (a, t)
                });
                let b1 = times.measure(Phase::MsmBG1, |t| {
                    let from_inputs = backend.msm_g1(
                        &bases(key.b_g1(), 0..b_inputs_len, BaseQuery::BG1, set),
                        b_inputs,
                        t,
                    )?;
                    Ok::<_, BackendError>(
                        from_inputs
                            + backend.msm_g1(
                                &bases(key.b_g1(), b_inputs_len..b_len, BaseQuery::BG1, set),
                                b_aux,
                                t,
                            )?,
                    )
                });
                // A panic in an MSM is the partition's panic (the daemon
                // catches it and fails only this job).
                let join = |h: std::thread::ScopedJoinHandle<'_, _>| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                };
                (join(l), join(a), b1)
            });
            times.merge(&l_times);
            times.merge(&a_times);
            let l = l.map_err(backend_err)?;
            let a_answer = a_answer.map_err(backend_err)?;
            let b1_answer = b1_answer.map_err(backend_err)?;
            Ok::<_, ProveError>((h, l, a_answer, b1_answer))
        })();
        match g2.join() {
            Ok(g2) => (g1, g2),
            // A panic in the G2 MSM is the partition's panic (the daemon
            // catches it and fails only this job).
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    let (h, l, a_answer, b1_answer) = g1?;
    let b2_answer = g2.map_err(backend_err)?;
    times.merge(&g2_times);
    // The MSMs' wall time is the span's less the quotient's own (the
    // device runs them one after the other; a wait of the quotient for the
    // G2 MSM is that MSM's time).
    let ntt = ntt_ms(times) - ntt_before;
    times.add(Phase::Msm, (ms_since(start) - ntt).max(0.0));
    drop((
        scratch_a,
        scratch_b,
        b_inputs,
        input_assignment,
        aux_assignment,
    ));

    let t = Instant::now();
    let g_a = vk.delta_g1 * r + vk.alpha_g1 + a_answer;
    let g_b = vk.delta_g2 * s + vk.beta_g2 + b2_answer;
    let g_c = a_answer * s
        + b1_answer * r
        + vk.delta_g1 * (r * s)
        + vk.alpha_g1 * s
        + vk.beta_g1 * r
        + h
        + l;
    let proof = Proof {
        a: g_a.to_affine(),
        b: g_b.to_affine(),
        c: g_c.to_affine(),
    };
    times.add(Phase::Assembly, ms_since(t));
    Ok(proof)
}

/// Synthesises `circuit` into buffers from `pool` and proves it: the
/// one-call path for tools and tests.
pub fn create_proof<C: Circuit<Scalar>>(
    circuit: C,
    key: &dyn ProvingKey,
    r: Scalar,
    s: Scalar,
    backend: &dyn Backend,
    pool: &PinnedPool,
) -> Result<Proof<Bls12>, ProveError> {
    let shape = shape_of_key(key);
    let syn = synthesis::synthesize(circuit, &shape, pool)?;
    let mut times = BackendTimes::default();
    prove_synthesized(backend, key, syn, r, s, &mut times)
}

/// [`create_proof`] with synthesis from compiled constraints (checked
/// against the circuit as it runs).
pub fn create_proof_compiled<C: Circuit<Scalar>>(
    circuit: C,
    r1cs: &CompiledR1cs,
    key: &dyn ProvingKey,
    r: Scalar,
    s: Scalar,
    backend: &dyn Backend,
    pool: &PinnedPool,
) -> Result<Proof<Bls12>, ProveError> {
    let shape = shape_of_key(key);
    let syn = synthesis::synthesize_compiled(circuit, r1cs, &shape, pool, true)?;
    let mut times = BackendTimes::default();
    prove_synthesized(backend, key, syn, r, s, &mut times)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// r and s as the module docs derive them, computed without this crate
    /// (nor rand_chacha, nor blstrs) by this Python 3 script, so that a seed
    /// keeps proving the same bytes across versions and dependency bumps:
    ///
    /// ```text
    /// import hashlib, struct
    /// R = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001
    /// def rotl(v, c): return ((v << c) & 0xffffffff) | (v >> (32 - c))
    /// def qr(x, a, b, c, d):
    ///     x[a] = (x[a] + x[b]) & 0xffffffff; x[d] = rotl(x[d] ^ x[a], 16)
    ///     x[c] = (x[c] + x[d]) & 0xffffffff; x[b] = rotl(x[b] ^ x[c], 12)
    ///     x[a] = (x[a] + x[b]) & 0xffffffff; x[d] = rotl(x[d] ^ x[a], 8)
    ///     x[c] = (x[c] + x[d]) & 0xffffffff; x[b] = rotl(x[b] ^ x[c], 7)
    /// def block(key, counter):  # RFC 8439 ChaCha20, 64-bit counter, stream 0
    ///     s = list(struct.unpack('<4I', b'expand 32-byte k')) + list(struct.unpack('<8I', key)) \
    ///         + [counter & 0xffffffff, counter >> 32, 0, 0]
    ///     x = s[:]
    ///     for _ in range(10):
    ///         qr(x, 0, 4, 8, 12); qr(x, 1, 5, 9, 13); qr(x, 2, 6, 10, 14); qr(x, 3, 7, 11, 15)
    ///         qr(x, 0, 5, 10, 15); qr(x, 1, 6, 11, 12); qr(x, 2, 7, 8, 13); qr(x, 3, 4, 9, 14)
    ///     return struct.pack('<16I', *[(a + b) & 0xffffffff for a, b in zip(x, s)])
    /// def rs(seed, partition):
    ///     key = hashlib.sha256(b'fleet-groth16-rs/v1' + struct.pack('<Q', seed)
    ///                          + struct.pack('<I', partition)).digest()
    ///     stream, out = b''.join(block(key, i) for i in range(8)), []
    ///     while len(out) < 2:  # Scalar::random: 32 LE bytes, top bit cleared, below r
    ///         v = int.from_bytes(stream[:32], 'little') & ((1 << 255) - 1); stream = stream[32:]
    ///         if v < R: out.append(v)
    ///     return key.hex(), ['%064x' % v for v in out]
    /// for seed, p in [(0, 0), (42, 0), (42, 1), (2**64 - 1, 2**32 - 1)]: print(seed, p, *rs(seed, p))
    /// ```
    ///
    /// The key for (42, 0) checked with coreutils as well:
    /// `printf 'fleet-groth16-rs/v1\x2a\0\0\0\0\0\0\0\0\0\0\0' | sha256sum` gives
    /// `09ba1058d3bc08e16fafdeb9c568802e112d0d8446d81c182f64a6c390a66814`.
    #[test]
    fn partition_randomness_matches_the_documented_derivation() {
        const KNOWN: [(u64, u32, &str, &str); 4] = [
            (
                0,
                0,
                "47e7d72eed6f3ebcd4f293bdb1a1d86825c741a27648f7a734b21afe242e6f4e",
                "422dfa45e3e25b58e0330073da5b5eac92172b1b4a1fd54bb6fd40f82619c120",
            ),
            (
                42,
                0,
                "5399ef8feb8b7585cd8f351eb434618bb7569344380ecfc03bf538708c89fc6a",
                "127a039a128445a72f9be534d41168d3dc0da3f14b1345484264bc9284e2bd87",
            ),
            (
                42,
                1,
                "0c3ee99b9d0ce4057e996a44922083e16f2708e48a47544c517479d9c1a6a6e2",
                "2d942a4fb5c735a724133b832538608051f3485f2a5f38d5ed89206f14178b99",
            ),
            (
                u64::MAX,
                u32::MAX,
                "436310db4f9c7dd3b988e794265ea00cde7e341fa38e719efb2b7cb3442eaa39",
                "5dd1c59b24124eeb4150ae4344ac75444a22b251cc81cb182827502682e4f17e",
            ),
        ];
        for (seed, partition, r, s) in KNOWN {
            let (got_r, got_s) = partition_randomness(seed, partition);
            assert_eq!(
                (
                    hex::encode(got_r.to_bytes_be()),
                    hex::encode(got_s.to_bytes_be())
                ),
                (r.to_string(), s.to_string()),
                "seed {seed}, partition {partition}"
            );
        }
    }

    #[test]
    fn os_blinding_differs_every_draw_and_seeded_blinding_is_the_derivation() {
        let (r0, s0) = Blinding::Os.for_partition(0);
        let (r1, s1) = Blinding::Os.for_partition(0);
        assert_ne!(r0, r1);
        assert_ne!(s0, s1);
        assert_ne!(r0, s0);
        assert_eq!(
            Blinding::from_seed(Some(7)).for_partition(3),
            partition_randomness(7, 3)
        );
        assert_eq!(Blinding::from_seed(None), Blinding::Os);
    }

    #[test]
    fn partition_randomness_is_deterministic_and_distinct() {
        let (r0, s0) = partition_randomness(42, 0);
        assert_eq!(partition_randomness(42, 0), (r0, s0));
        assert_ne!(r0, s0);
        let (r1, _) = partition_randomness(42, 1);
        assert_ne!(r0, r1);
        let (r2, _) = partition_randomness(43, 0);
        assert_ne!(r0, r2);
    }
}
