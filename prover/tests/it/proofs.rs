//! Proofs from our pipeline against bellperson's: byte-identical for fixed
//! r, s, verified by bellperson's verifier. The checks are generic over
//! `&dyn Backend`, so every backend runs the same ones (the CUDA backend
//! instantiates them when a device is present), and every proof is made
//! twice: synthesised the bellperson way and from compiled constraints.

use bellperson::groth16::{self, prepare_verifying_key, verify_proof, Parameters, Proof};
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::{Bls12, Scalar};
use ff::Field;
use prover::backend::cpu::fft::{self, Domain};
use prover::backend::cpu::CpuBackend;
use prover::backend::{Backend, BackendTimes};
use prover::circuit::{self, CircuitKind};
use prover::prove::{self, partition_randomness, ProveError};
use prover::synthesis::{self, SynthesisError as OurSynthesisError};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

/// A small circuit of our own with every density case: aux used only in A,
/// only in C, inputs used in B and not, an unused-in-B input, a constant
/// term, and a coefficient of zero.
#[derive(Clone)]
struct Mixed {
    n: usize,
    x: Option<Scalar>,
}

impl Mixed {
    fn output(x: Scalar, n: usize) -> (Scalar, Scalar) {
        let mut v = x;
        for i in 0..n {
            v = v * v + Scalar::from(i as u64 + 1);
        }
        (v, x + Scalar::from(3))
    }
}

impl Circuit<Scalar> for Mixed {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let x_val = self.x;
        let x = cs.alloc(|| "x", || x_val.ok_or(SynthesisError::AssignmentMissing))?;
        let mut v_val = x_val;
        let mut v = x;
        for i in 0..self.n {
            let k = Scalar::from(i as u64 + 1);
            let next_val = v_val.map(|v| v * v + k);
            let next = cs.alloc(|| "v", || next_val.ok_or(SynthesisError::AssignmentMissing))?;
            cs.enforce(
                || "step",
                |lc| lc + v,
                |lc| lc + v + (Scalar::ZERO, x),
                |lc| lc + next - (k, CS::one()),
            );
            v = next;
            v_val = next_val;
        }
        let (out_val, shifted_val) = match x_val {
            Some(x) => {
                let (o, s) = Mixed::output(x, self.n);
                (Some(o), Some(s))
            }
            None => (None, None),
        };
        let out = cs.alloc_input(
            || "out",
            || out_val.ok_or(SynthesisError::AssignmentMissing),
        )?;
        let shifted = cs.alloc_input(
            || "shifted",
            || shifted_val.ok_or(SynthesisError::AssignmentMissing),
        )?;
        // out · 1 = v : `out` is an input used in A (dense anyway), ONE in B.
        cs.enforce(|| "out", |lc| lc + out, |lc| lc + CS::one(), |lc| lc + v);
        // (x + 3) · shifted = shifted · (x + 3): uses an input in B.
        let prod_val = shifted_val.map(|s| s * s);
        let prod = cs.alloc(
            || "prod",
            || prod_val.ok_or(SynthesisError::AssignmentMissing),
        )?;
        cs.enforce(
            || "shifted",
            |lc| lc + x + (Scalar::from(3), CS::one()),
            |lc| lc + shifted,
            |lc| lc + prod,
        );
        Ok(())
    }
}

fn params_for<C: Circuit<Scalar>>(shape: C, seed: u64) -> Parameters<Bls12> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    groth16::generate_random_parameters::<Bls12, _, _>(shape, &mut rng).expect("parameters")
}

fn proof_bytes(p: &Proof<Bls12>) -> Vec<u8> {
    let mut v = Vec::new();
    p.write(&mut v).expect("write proof");
    v
}

/// The generic check: our proof equals bellperson's byte for byte, verifies,
/// and fails with a wrong public input.
fn proof_matches_bellperson<C: Circuit<Scalar> + Clone + Send>(
    backend: &dyn Backend,
    circuit: C,
    params: &Parameters<Bls12>,
    public_inputs: &[Scalar],
    partition: u32,
) {
    let (r, s) = partition_randomness(7, partition);
    let pool = synthesis::heap_pool(1 << 30);
    let ours =
        prove::create_proof(circuit.clone(), params, r, s, backend, &pool).expect("our proof");
    let r1cs = prover::compiled::compile(circuit.clone()).expect("compiled constraints");
    let compiled =
        prove::create_proof_compiled(circuit.clone(), &r1cs, params, r, s, backend, &pool)
            .expect("our proof from compiled constraints");
    let theirs = groth16::create_proof(circuit, params, r, s).expect("bellperson proof");
    assert_eq!(
        proof_bytes(&ours),
        proof_bytes(&theirs),
        "proof bytes differ"
    );
    assert_eq!(
        proof_bytes(&compiled),
        proof_bytes(&theirs),
        "proof bytes from compiled constraints differ"
    );

    let pvk = prepare_verifying_key(&params.vk);
    assert!(verify_proof(&pvk, &ours, public_inputs).expect("verify"));
    let mut wrong = public_inputs.to_vec();
    wrong[0] += Scalar::ONE;
    assert!(!verify_proof(&pvk, &ours, &wrong).expect("verify wrong input"));
}

fn run_all(backend: &dyn Backend) {
    // Own circuit at a few domain sizes (2^8 .. 2^11).
    for (n, seed) in [(200usize, 1u64), (1000, 2), (2000, 3)] {
        let params = params_for(Mixed { n, x: None }, seed);
        let x = Scalar::from(seed + 10);
        let (out, shifted) = Mixed::output(x, n);
        proof_matches_bellperson(
            backend,
            Mixed { n, x: Some(x) },
            &params,
            &[out, shifted],
            n as u32,
        );
    }
    // The bundled chain circuit.
    for size in [1usize << 9, 1 << 11] {
        let params = params_for(
            circuit::shape_circuit(CircuitKind::Chain, size).expect("shape"),
            5,
        );
        let (c, inputs) = circuit::bundled(CircuitKind::Chain, size, 11).expect("circuit");
        proof_matches_bellperson(backend, c, &params, &inputs, 0);
    }
}

#[test]
fn cpu_proofs_are_byte_identical_to_bellperson_and_verify() {
    run_all(&CpuBackend::new());
}

#[test]
fn cuda_proofs_are_byte_identical_to_bellperson_and_verify() {
    // Runs only where a CUDA device and NVRTC are usable; the skip is counted.
    if !fleet_testkit::have(
        fleet_testkit::Need::Gpu,
        prover::backend::cuda::cuda_available(),
        "no CUDA device or no libnvrtc",
    ) {
        return;
    }
    let backend = prover::backend::cuda::CudaBackend::new(0).expect("CUDA device 0");
    run_all(&backend);
}

#[test]
fn cpu_sha256_proof_is_byte_identical_to_bellperson() {
    // One block: the smallest sha256 circuit (about 2^15 constraints).
    let size = circuit::shape(CircuitKind::Sha256, 1 << 15)
        .expect("shape")
        .padded_constraints();
    let params = params_for(
        circuit::shape_circuit(CircuitKind::Sha256, size).expect("shape"),
        9,
    );
    let (c, inputs) = circuit::bundled(CircuitKind::Sha256, size, 4).expect("circuit");
    proof_matches_bellperson(&CpuBackend::new(), c, &params, &inputs, 3);
}

#[test]
fn circuit_bigger_than_its_parameters_is_a_clear_error() {
    let params = params_for(Mixed { n: 100, x: None }, 4);
    let pool = synthesis::heap_pool(1 << 28);
    let (r, s) = partition_randomness(1, 0);
    let big = Mixed {
        n: 300,
        x: Some(Scalar::from(5u64)),
    };
    let err = prove::create_proof(big, &params, r, s, &CpuBackend::new(), &pool).unwrap_err();
    assert!(
        matches!(
            err,
            ProveError::Synthesis(OurSynthesisError::TooLarge { .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("larger than its parameters"),
        "{err}"
    );
}

#[test]
fn quotient_matches_bellperson_evaluation_domain() {
    use bellperson::domain::EvaluationDomain;
    use ec_gpu_gen::threadpool::Worker;
    let worker = Worker::new();
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    for log_n in [1u32, 4, 10, 13] {
        let n = 1usize << log_n;
        let rand = |rng: &mut ChaCha20Rng| -> Vec<Scalar> {
            (0..n).map(|_| Scalar::random(&mut *rng)).collect()
        };
        let (a, b, c) = (rand(&mut rng), rand(&mut rng), rand(&mut rng));

        // bellperson's steps, as its prover runs them.
        let mut ea = EvaluationDomain::from_coeffs(a.clone()).unwrap();
        let mut eb = EvaluationDomain::from_coeffs(b.clone()).unwrap();
        let mut ec = EvaluationDomain::from_coeffs(c.clone()).unwrap();
        EvaluationDomain::ifft_many(&mut [&mut ea, &mut eb, &mut ec], &worker, &mut None).unwrap();
        EvaluationDomain::coset_fft_many(&mut [&mut ea, &mut eb, &mut ec], &worker, &mut None)
            .unwrap();
        ea.mul_assign(&worker, &eb);
        ea.sub_assign(&worker, &ec);
        ea.divide_by_z_on_coset(&worker);
        ea.icoset_fft(&worker, &mut None).unwrap();

        let (mut a2, mut b2, mut c2) = (a.clone(), b.clone(), c.clone());
        CpuBackend::new()
            .quotient(
                &mut a2,
                &mut b2,
                &mut c2,
                false,
                &mut BackendTimes::default(),
            )
            .unwrap();
        assert_eq!(a2.as_slice(), ea.as_ref(), "n = {n}");

        // The plain forward FFT too.
        let mut e = EvaluationDomain::from_coeffs(a.clone()).unwrap();
        e.fft(&worker, &mut None).unwrap();
        let d = Domain::new(n).unwrap();
        let mut f = a.clone();
        fft::fft(&mut f, d.omega, d.log_n);
        assert_eq!(f.as_slice(), e.as_ref(), "n = {n}");
    }
}
