//! Fast parallel (test-only randomness) parameter generation.
//!
//! **These parameters are NOT from a trusted setup.** The toxic waste (τ, α, β,
//! γ, δ and the two generators) is drawn from a seeded RNG, so anyone who knows
//! the seed can forge proofs. They exist to test and benchmark the prover.
//!
//! Output is exactly what `bellperson::groth16::generate_random_parameters`
//! returns for an RNG in the same state (same points, same filtering of the
//! identity out of `a`/`b_g1`/`b_g2`, same order of `h` and `l`), computed
//! differently: a counting pass sizes the domain while one synthesis records
//! the constraints beside it, the Lagrange coefficients `L_j(τ)` come in
//! closed form with batch inversion, the QAP is evaluated at τ from the
//! recording on every core ([`qap`]), and all group elements come from
//! fixed-base window tables ([`fixed_base`]), walked on the CPU in parallel
//! or on a GPU ([`fixed_base::FixedBaseEngine`]); the scalars (the QAP at
//! τ, the powers of τ) are always computed on the host.

pub mod bench;
pub mod command;
pub mod fixed_base;
pub mod preflight;
pub mod qap;

use std::sync::Arc;
use std::time::Instant;

use bellperson::groth16::{Parameters, VerifyingKey};
use bellperson::{Circuit, SynthesisError};
use blstrs::{Bls12, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::{Field, PrimeField};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;

use crate::backend::BackendError;
use crate::circuit::{CircuitError, CircuitShape};
use crate::compiled::CompileError;
use fixed_base::{CpuFixedBase, FixedBaseEngine, FixedBaseTable};

/// Said wherever generated parameters are announced.
pub const TEST_ONLY_WARNING: &str =
    "TEST-ONLY parameters: the toxic waste comes from a seeded RNG, this is NOT a trusted setup; anyone who knows the seed can forge proofs";

/// Scalars per parallel work item for field-element passes.
const CHUNK: usize = 4096;

/// Why parameters could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("synthesising the circuit while {stage}: {source}")]
    Synthesis {
        stage: &'static str,
        #[source]
        source: SynthesisError,
    },
    #[error("the circuit needs a domain of 2^{log2}, beyond the field's 2^{max} roots of unity")]
    DomainTooLarge { log2: u32, max: u32 },
    #[error("the circuit is not deterministic in shape: {0}")]
    ShapeChanged(String),
    #[error("recording the circuit for its QAP: {0}")]
    Record(#[from] CompileError),
    #[error("evaluating the QAP at τ: {0}")]
    Qap(#[from] qap::DomainTooSmall),
    #[error("the seed drew a degenerate trapdoor ({0}); pick another seed")]
    DegenerateTrapdoor(&'static str),
    #[error("private variable {index} is unconstrained (its L query point is the identity)")]
    UnconstrainedVariable { index: usize },
    #[error(transparent)]
    Circuit(#[from] CircuitError),
    #[error("fixed-base multiplication on the {engine} backend: {source}")]
    FixedBase {
        engine: &'static str,
        /// Boxed: a device error is large, and every `Result` carrying a
        /// setup error would pay for it.
        #[source]
        source: Box<BackendError>,
    },
    #[error("the parameter set's writer stopped taking parts")]
    WriterStopped,
}

/// A part of a parameter set as generation finishes it, in the order of
/// bellperson's file: the verifying key, then h, l, a and b_g1 (G1), then
/// b_g2 (G2). Handed out while the next part is computed, so a set can be
/// written as it is made.
pub enum SetPart {
    /// Boxed: the key is large beside a part's shared vector.
    Vk(Box<VerifyingKey<Bls12>>),
    G1(Arc<Vec<G1Affine>>),
    G2(Arc<Vec<G2Affine>>),
    /// h, made before the verifying key (it needs only the domain): a
    /// writer may put it at its place, after a key of `num_inputs` input
    /// points, at once. The same vector comes again, in order, as the
    /// [`SetPart::G1`] after the key.
    HAhead {
        num_inputs: usize,
        h: Arc<Vec<G1Affine>>,
    },
}

/// The secret randomness of a Groth16 setup.
#[derive(Clone, Debug)]
pub struct ToxicWaste {
    pub g1: G1Projective,
    pub g2: G2Projective,
    pub alpha: Scalar,
    pub beta: Scalar,
    pub gamma: Scalar,
    pub delta: Scalar,
    pub tau: Scalar,
}

impl ToxicWaste {
    /// Draws the toxic waste from ChaCha20 seeded with `seed`, in the order
    /// bellperson's `generate_random_parameters` draws it from its RNG.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        ToxicWaste {
            g1: G1Projective::random(&mut rng),
            g2: G2Projective::random(&mut rng),
            alpha: Scalar::random(&mut rng),
            beta: Scalar::random(&mut rng),
            gamma: Scalar::random(&mut rng),
            delta: Scalar::random(&mut rng),
            tau: Scalar::random(&mut rng),
        }
    }
}

/// TEST-ONLY parameters for `circuit` from toxic waste seeded with `seed`.
///
/// The circuit is synthesised twice, at once on two threads (count, and
/// record), hence `Clone + Send`; clone a shape (no witness) circuit,
/// which is cheap.
pub fn generate<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    seed: u64,
) -> Result<Parameters<Bls12>, SetupError> {
    generate_on(circuit, seed, &CpuFixedBase)
}

/// [`generate`] with the fixed-base multiplications on `engine`: the same
/// parameters, byte for byte, whichever engine runs them.
pub fn generate_on<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    seed: u64,
    engine: &dyn FixedBaseEngine,
) -> Result<Parameters<Bls12>, SetupError> {
    generate_with_engine(circuit, &ToxicWaste::from_seed(seed), engine)
}

/// [`generate_on`], handing each part of the set to `emit` as soon as it
/// is done (see [`SetPart`]); `emit` returning false stops generation with
/// [`SetupError::WriterStopped`].
pub fn generate_streaming<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    seed: u64,
    engine: &dyn FixedBaseEngine,
    emit: &mut dyn FnMut(SetPart) -> bool,
) -> Result<Parameters<Bls12>, SetupError> {
    generate_parts(circuit, &ToxicWaste::from_seed(seed), engine, emit)
}

/// Inverts every element in place with one field inversion per chunk.
/// All elements must be non-zero.
fn batch_invert(values: &mut [Scalar]) -> Result<(), SetupError> {
    values.par_chunks_mut(CHUNK).try_for_each(|chunk| {
        let mut prefix = Vec::with_capacity(chunk.len());
        let mut acc = Scalar::ONE;
        for v in chunk.iter() {
            prefix.push(acc);
            acc *= v;
        }
        let mut inv = Option::<Scalar>::from(acc.invert()).ok_or(
            SetupError::DegenerateTrapdoor("τ lies in the evaluation domain"),
        )?;
        for (v, before) in chunk.iter_mut().zip(prefix).rev() {
            let next = inv * *v;
            *v = inv * before;
            inv = next;
        }
        Ok(())
    })
}

/// `out[i] = start · ratio^i` for the whole slice, in parallel.
fn geometric(out: &mut [Scalar], start: Scalar, ratio: Scalar) {
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut p = start * ratio.pow_vartime([(c * CHUNK) as u64]);
            for v in chunk {
                *v = p;
                p *= ratio;
            }
        });
}

/// Lagrange basis of the size-`2^log2` domain evaluated at τ:
/// `L_j(τ) = (τ^m − 1)/m · ω^j/(τ − ω^j)`, the values bellperson obtains with
/// an inverse FFT of the powers of τ. Also returns `t(τ) = τ^m − 1`.
fn lagrange_at(tau: Scalar, log2: u32) -> Result<(Vec<Scalar>, Scalar), SetupError> {
    let m = 1usize << log2;
    let mut omega = Scalar::ROOT_OF_UNITY;
    for _ in log2..Scalar::S {
        omega = omega.square();
    }
    let t_tau = tau.pow_vartime([m as u64]) - Scalar::ONE;
    if bool::from(t_tau.is_zero()) {
        return Err(SetupError::DegenerateTrapdoor(
            "τ lies in the evaluation domain",
        ));
    }
    let m_inv = Option::<Scalar>::from(Scalar::from(m as u64).invert()).ok_or(
        SetupError::DomainTooLarge {
            log2,
            max: Scalar::S,
        },
    )?;
    let factor = t_tau * m_inv;
    let mut powers = vec![Scalar::ZERO; m];
    geometric(&mut powers, Scalar::ONE, omega);
    let mut denominators: Vec<Scalar> = powers.par_iter().map(|w| tau - w).collect();
    batch_invert(&mut denominators)?;
    powers
        .par_iter_mut()
        .zip(denominators.par_iter())
        .for_each(|(w, d)| *w = factor * *w * d);
    Ok((powers, t_tau))
}

/// The non-zero scalars of `inputs` then `aux`, in order.
fn nonzero(inputs: &[Scalar], aux: &[Scalar]) -> Vec<Scalar> {
    inputs
        .par_iter()
        .chain(aux.par_iter())
        .filter(|s| !bool::from(s.is_zero()))
        .copied()
        .collect()
}

/// Parameters for `circuit` from explicit toxic waste.
pub fn generate_with<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    toxic: &ToxicWaste,
) -> Result<Parameters<Bls12>, SetupError> {
    generate_with_engine(circuit, toxic, &CpuFixedBase)
}

/// Parameters for `circuit` from explicit toxic waste, the group elements
/// from `engine`.
pub fn generate_with_engine<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    toxic: &ToxicWaste,
    engine: &dyn FixedBaseEngine,
) -> Result<Parameters<Bls12>, SetupError> {
    generate_parts(circuit, toxic, engine, &mut |_| true)
}

/// The generator: the parts in the file's order, each emitted once made.
fn generate_parts<C: Circuit<Scalar> + Clone + Send>(
    circuit: &C,
    toxic: &ToxicWaste,
    engine: &dyn FixedBaseEngine,
    emit: &mut dyn FnMut(SetPart) -> bool,
) -> Result<Parameters<Bls12>, SetupError> {
    let started = Instant::now();
    // The recording, one thread, is the longest step before the file can
    // start. A counting pass beside it (for most circuits much cheaper)
    // gives the domain early, so the Lagrange basis and h are made while
    // the recording goes on.
    let for_recording = circuit.clone();
    std::thread::scope(|scope| {
        let recording = scope.spawn(move || {
            let recorded = crate::compiled::record(for_recording);
            (recorded, Instant::now())
        });
        let counted =
            CircuitShape::of(circuit.clone()).map_err(|source| SetupError::Synthesis {
                stage: "counting its shape",
                source,
            })?;
        let recorded = move || match recording.join() {
            Ok((recorded, at)) => Ok((recorded?, at)),
            // A panic in the circuit is a bug: it stays a panic.
            Err(panic) => std::panic::resume_unwind(panic),
        };
        from_shape(counted, recorded, toxic, engine, emit, started)
    })
}

/// The generator once the shape is counted: `recorded` waits for the
/// recording. The parts go out in the file's order, each once made.
fn from_shape(
    counted: CircuitShape,
    recorded: impl FnOnce() -> Result<(crate::compiled::Recorded, Instant), SetupError>,
    toxic: &ToxicWaste,
    engine: &dyn FixedBaseEngine,
    emit: &mut dyn FnMut(SetPart) -> bool,
    started: Instant,
) -> Result<Parameters<Bls12>, SetupError> {
    let mut emit = |part| emit(part).then_some(()).ok_or(SetupError::WriterStopped);
    let device = |source| SetupError::FixedBase {
        engine: engine.name(),
        source: Box::new(source),
    };
    let counted_at = Instant::now();
    let log2 = counted.log2_domain();
    if log2 >= Scalar::S {
        return Err(SetupError::DomainTooLarge {
            log2,
            max: Scalar::S,
        });
    }
    let m = counted.domain_size();

    let gamma_inv = Option::<Scalar>::from(toxic.gamma.invert())
        .ok_or(SetupError::DegenerateTrapdoor("γ = 0"))?;
    let delta_inv = Option::<Scalar>::from(toxic.delta.invert())
        .ok_or(SetupError::DegenerateTrapdoor("δ = 0"))?;

    let (num_inputs, num_aux) = (counted.num_inputs, counted.num_aux);
    let variables = num_inputs + num_aux;
    let g1_table = engine
        .g1(FixedBaseTable::new(toxic.g1, (m - 1) + 3 * variables))
        .map_err(device)?;
    let g2_table = engine
        .g2(FixedBaseTable::new(toxic.g2, variables))
        .map_err(device)?;
    let tables_done = Instant::now();

    // (β·u_i(τ) + α·v_i(τ) + w_i(τ)) / γ for inputs, / δ for aux
    let ext = |e: &qap::Evaluations, inv: Scalar| -> Vec<Scalar> {
        e.at.par_iter()
            .zip(e.bt.par_iter())
            .zip(e.ct.par_iter())
            .map(|((a, b), c)| (toxic.beta * a + toxic.alpha * b + c) * inv)
            .collect()
    };

    // h_i = τ^i · t(τ) / δ for i < m − 1 needs neither the circuit nor its
    // QAP, so it is multiplied on a thread of its own (the device's, for a
    // GPU engine) while this one evaluates the QAP. The verifying key
    // comes first in the file and needs only the inputs' QAP: it is
    // written while the aux variables' is evaluated, its few input points
    // multiplied here on the host (the device is busy with h).
    let t_tau = toxic.tau.pow_vartime([m as u64]) - Scalar::ONE;
    let g1_mul = &*g1_table;
    let host = std::thread::scope(|scope| {
        let h = scope.spawn(move || {
            let started = Instant::now();
            let mut h_scalars = vec![Scalar::ZERO; m - 1];
            geometric(&mut h_scalars, t_tau * delta_inv, toxic.tau);
            g1_mul
                .multiply(&h_scalars)
                .map(|h| (h, started.elapsed().as_secs_f64()))
        });
        (|| {
            let (lagrange, _) = lagrange_at(toxic.tau, log2)?;
            let lagrange_done = Instant::now();
            // h usually comes before the recording ends: the writer puts
            // it at its place at once, and the disk is busy meanwhile.
            let (h, h_s) = match h.join() {
                Ok(h) => h.map_err(device)?,
                // A panic in the multiplication is a bug: it stays a panic.
                Err(panic) => std::panic::resume_unwind(panic),
            };
            let h = Arc::new(h);
            emit(SetPart::HAhead {
                num_inputs: counted.num_inputs,
                h: h.clone(),
            })?;
            let (recorded, recorded_at) = recorded()?;
            let shape = CircuitShape {
                num_inputs: recorded.num_inputs,
                num_aux: recorded.num_aux,
                num_constraints: recorded.num_constraints() - recorded.num_inputs,
            };
            if shape != counted {
                return Err(SetupError::ShapeChanged(format!(
                    "counted {counted:?}, recorded {shape:?}"
                )));
            }
            let inputs = qap::inputs(&recorded, &lagrange)?;
            let g1 = toxic.g1;
            let ic: Vec<G1Affine> = ext(&inputs, gamma_inv)
                .par_iter()
                .map(|s| (g1 * s).to_affine())
                .collect();
            let (g1, g2) = (toxic.g1.to_affine(), toxic.g2.to_affine());
            let vk = VerifyingKey::<Bls12> {
                alpha_g1: (g1 * toxic.alpha).to_affine(),
                beta_g1: (g1 * toxic.beta).to_affine(),
                beta_g2: (g2 * toxic.beta).to_affine(),
                gamma_g2: (g2 * toxic.gamma).to_affine(),
                delta_g1: (g1 * toxic.delta).to_affine(),
                delta_g2: (g2 * toxic.delta).to_affine(),
                ic,
            };
            emit(SetPart::Vk(Box::new(vk.clone())))?;
            emit(SetPart::G1(h.clone()))?;
            let aux = qap::aux(&recorded, &lagrange)?;
            Ok::<_, SetupError>((vk, h, h_s, inputs, aux, lagrange_done, recorded_at))
        })()
    });
    let (vk, h, h_s, inputs, aux, lagrange_done, recorded_at) = host?;
    let qap_done = Instant::now();
    let (inputs, aux) = (&inputs, &aux);

    let l = g1_table.multiply(&ext(aux, delta_inv)).map_err(device)?;
    if let Some(index) = l.iter().position(|p| bool::from(p.is_identity())) {
        return Err(SetupError::UnconstrainedVariable { index });
    }
    let l = Arc::new(l);
    emit(SetPart::G1(l.clone()))?;

    // A multiple of a generator of prime order is the identity exactly
    // when its scalar is zero: dropping zero scalars before multiplying
    // drops the points bellperson filters out afterwards, without making them.
    let a = Arc::new(
        g1_table
            .multiply(&nonzero(&inputs.at, &aux.at))
            .map_err(device)?,
    );
    emit(SetPart::G1(a.clone()))?;
    let bt = nonzero(&inputs.bt, &aux.bt);
    let b_g1 = Arc::new(g1_table.multiply(&bt).map_err(device)?);
    emit(SetPart::G1(b_g1.clone()))?;
    let b_g2 = Arc::new(g2_table.multiply(&bt).map_err(device)?);
    drop(bt);
    emit(SetPart::G2(b_g2.clone()))?;

    let done = Instant::now();
    tracing::debug!(
        domain_log2 = log2,
        variables,
        engine = engine.name(),
        g1_window = g1_table.window(),
        g2_window = g2_table.window(),
        count_s = (counted_at - started).as_secs_f64(),
        tables_s = (tables_done - counted_at).as_secs_f64(),
        lagrange_s = (lagrange_done - tables_done).as_secs_f64(),
        record_s = (recorded_at - started).as_secs_f64(),
        qap_s = (qap_done - recorded_at.max(lagrange_done)).as_secs_f64(),
        h_s,
        overlapped_s = (qap_done - tables_done).as_secs_f64(),
        points_s = (done - qap_done).as_secs_f64(),
        "generated parameters"
    );
    Ok(Parameters {
        vk,
        h,
        l,
        a,
        b_g1,
        b_g2,
    })
}

/// Parses `1024`, `2^10` or `1<<10`: the one size syntax of every command.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let exponent = s
        .strip_prefix("2^")
        .or_else(|| s.strip_prefix("1<<"))
        .map(|e| e.trim().parse::<u32>());
    let size = match exponent {
        Some(Ok(e)) if e < usize::BITS => Ok(1usize << e),
        Some(_) => Err(()),
        None => s.replace('_', "").parse::<usize>().map_err(|_| ()),
    };
    size.map_err(|()| {
        format!(
            "`{s}` is not a size: write a number of constraints (1024) or a power of two (2^10)"
        )
    })
}

/// [`parse_size`] for a bundled circuit's size: also within
/// [`crate::circuit::MIN_SIZE`]..=[`crate::circuit::MAX_SIZE`], so that a
/// command line with a size no circuit can have is a usage error.
pub fn parse_circuit_size(s: &str) -> Result<usize, String> {
    use crate::circuit::{MAX_SIZE, MIN_SIZE};
    let size = parse_size(s)?;
    if (MIN_SIZE..=MAX_SIZE).contains(&size) {
        Ok(size)
    } else {
        Err(format!(
            "{size} is out of range: a circuit has between {MIN_SIZE} (2^4) and {MAX_SIZE} (2^27) constraints"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::ChainCircuit;

    #[test]
    fn lagrange_coefficients_interpolate_powers_of_tau() {
        // Σ_j L_j(τ)·ω^(jk) = τ^k for k < m: the basis reproduces polynomials of degree < m.
        let tau = Scalar::from(123_456_789u64);
        let log2 = 4;
        let (lagrange, t_tau) = lagrange_at(tau, log2).expect("lagrange");
        assert_eq!(t_tau, tau.pow_vartime([16]) - Scalar::ONE);
        let mut omega = Scalar::ROOT_OF_UNITY;
        for _ in log2..Scalar::S {
            omega = omega.square();
        }
        for k in [0u64, 1, 5, 15] {
            let sum: Scalar = lagrange
                .iter()
                .enumerate()
                .map(|(j, l)| *l * omega.pow_vartime([j as u64 * k]))
                .sum();
            assert_eq!(sum, tau.pow_vartime([k]), "k = {k}");
        }
    }

    #[test]
    fn tau_in_the_domain_is_rejected() {
        let err = lagrange_at(Scalar::ONE, 3).expect_err("τ = ω^0");
        assert!(matches!(err, SetupError::DegenerateTrapdoor(_)));
    }

    #[test]
    fn matches_bellperson_generator_for_the_same_rng() {
        let circuit = ChainCircuit::for_size(64, None);
        let ours = generate(&circuit, 9).expect("ours");
        let theirs = bellperson::groth16::generate_random_parameters::<Bls12, _, _>(
            circuit,
            &mut ChaCha20Rng::seed_from_u64(9),
        )
        .expect("bellperson");
        assert!(ours == theirs, "parameters differ from bellperson's");
        assert_eq!(ours.h.len(), 63);
    }

    /// Enforces one more constraint each time it is synthesised.
    #[derive(Clone)]
    struct Growing(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Circuit<Scalar> for Growing {
        fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), SynthesisError> {
            let n = 8 + self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let x = cs.alloc(|| "x", || Ok(Scalar::ONE))?;
            for i in 0..n {
                cs.enforce(|| format!("c{i}"), |lc| lc + x, |lc| lc + x, |lc| lc + x);
            }
            Ok(())
        }
    }

    /// Allocates a private variable no constraint mentions.
    #[derive(Clone)]
    struct Unconstrained;

    impl Circuit<Scalar> for Unconstrained {
        fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), SynthesisError> {
            let x = cs.alloc(|| "x", || Ok(Scalar::ONE))?;
            cs.alloc(|| "unused", || Ok(Scalar::ONE))?;
            cs.enforce(|| "x^2 = x", |lc| lc + x, |lc| lc + x, |lc| lc + x);
            Ok(())
        }
    }

    #[test]
    fn a_circuit_that_changes_shape_between_passes_is_rejected() {
        let err = generate(&Growing(Default::default()), 1)
            .map(drop)
            .expect_err("shape changed");
        assert!(matches!(err, SetupError::ShapeChanged(_)), "{err}");
    }

    /// Uses a variable it never allocated.
    #[derive(Clone)]
    struct Dangling;

    impl Circuit<Scalar> for Dangling {
        fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), SynthesisError> {
            let x = cs.alloc(|| "x", || Ok(Scalar::ONE))?;
            let ghost = bellperson::Variable::new_unchecked(bellperson::Index::Aux(5));
            cs.enforce(|| "c", |lc| lc + x, |lc| lc + ghost, |lc| lc + x);
            Ok(())
        }
    }

    #[test]
    fn a_term_on_an_unallocated_variable_is_refused() {
        let err = generate(&Dangling, 1).map(drop).expect_err("dangling");
        assert!(matches!(err, SetupError::Record(_)), "{err}");
    }

    #[test]
    fn unconstrained_private_variables_are_rejected_like_bellperson_does() {
        let err = generate(&Unconstrained, 1)
            .map(drop)
            .expect_err("unconstrained");
        assert!(
            matches!(err, SetupError::UnconstrainedVariable { index: 1 }),
            "{err}"
        );
        assert!(matches!(
            bellperson::groth16::generate_random_parameters::<Bls12, _, _>(
                Unconstrained,
                &mut ChaCha20Rng::seed_from_u64(1)
            )
            .map(drop),
            Err(SynthesisError::UnconstrainedVariable)
        ));
    }

    #[test]
    fn sizes_parse_as_numbers_or_powers_of_two() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("2^10"), Ok(1024));
        assert_eq!(parse_size("1<<12"), Ok(4096));
        assert!(parse_size("2^99").is_err());
        assert!(parse_size("big").expect_err("not a size").contains("2^10"));
        assert_eq!(parse_circuit_size("2^4"), Ok(16));
        assert_eq!(parse_circuit_size("2^27"), Ok(1 << 27));
        for bad in ["0", "15", "2^28", "2^63"] {
            let e = parse_circuit_size(bad).expect_err(bad);
            assert!(e.contains("out of range"), "{bad}: {e}");
        }
    }
}
