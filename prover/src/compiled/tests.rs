use super::*;
use crate::circuit::{self, CircuitKind};
use crate::synthesis::{self, heap_pool, SynthesisError, Synthesized};
use bellperson::{Circuit, ConstraintSystem, SynthesisError as BpError};
use blstrs::Scalar;
use ff::Field;

fn same(x: &Synthesized, y: &Synthesized) {
    assert_eq!(x.a.as_slice(), y.a.as_slice(), "a");
    assert_eq!(x.b.as_slice(), y.b.as_slice(), "b");
    assert_eq!(x.c.as_slice(), y.c.as_slice(), "c");
    assert_eq!(x.input_assignment.as_slice(), y.input_assignment.as_slice());
    assert_eq!(x.aux_assignment.as_slice(), y.aux_assignment.as_slice());
    assert_eq!(x.a_aux_density, y.a_aux_density);
    assert_eq!(x.b_input_density, y.b_input_density);
    assert_eq!(x.b_aux_density, y.b_aux_density);
    assert_eq!(x.num_constraints, y.num_constraints);
}

#[test]
fn compiled_synthesis_equals_synthesis_for_the_bundled_circuits() {
    let pool = heap_pool(1 << 30);
    for (kind, size) in [
        (CircuitKind::Chain, 1usize << 10),
        (CircuitKind::Chain, 1000),
        (CircuitKind::Sha256, 1 << 15),
    ] {
        let shape = circuit::shape(kind, size).unwrap();
        let r1cs = compile(circuit::shape_circuit(kind, size).unwrap()).unwrap();
        assert_eq!(r1cs.num_constraints, shape.padded_constraints(), "{kind}");
        for seed in [1u64, 2] {
            let (c, _) = circuit::bundled(kind, size, seed).unwrap();
            let plain = synthesis::synthesize(c, &shape, &pool).unwrap();
            for check in [true, false] {
                let (c, _) = circuit::bundled(kind, size, seed).unwrap();
                let fast = synthesis::synthesize_compiled(c, &r1cs, &shape, &pool, check).unwrap();
                same(&plain, &fast);
                let parts = fast.parts.expect("parts of a compiled synthesis");
                assert!(parts.witness_ms >= 0.0 && parts.abc_ms >= 0.0);
            }
        }
    }
}

#[test]
fn the_recording_does_not_depend_on_the_witness_and_its_digest_names_it() {
    let kind = CircuitKind::Chain;
    let blank = compile(circuit::shape_circuit(kind, 256).unwrap()).unwrap();
    let (with_witness, _) = circuit::bundled(kind, 256, 9).unwrap();
    let witnessed = compile(with_witness).unwrap();
    assert_eq!(blank.digest, witnessed.digest);
    assert_eq!(blank.structure_digest(), blank.digest);
    let other = compile(circuit::shape_circuit(kind, 512).unwrap()).unwrap();
    assert_ne!(blank.digest, other.digest);
    assert_eq!(blank.digest_hex().len(), 64);
    // The matrices are hashed in chunks on every core; the digest is the
    // same whatever the number of threads.
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(one.install(|| blank.structure_digest()), blank.digest);
}

/// Enforces `x · x = y` when x is even, `x · 1 = y` when odd: a circuit whose
/// constraints depend on its witness.
struct Shifty(u64);

impl Circuit<Scalar> for Shifty {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), BpError> {
        let x_val = Scalar::from(self.0);
        let x = cs.alloc(|| "x", || Ok(x_val))?;
        let y_val = if self.0.is_multiple_of(2) {
            x_val.square()
        } else {
            x_val
        };
        let y = cs.alloc(|| "y", || Ok(y_val))?;
        cs.enforce(|| "warm-up", |lc| lc + x, |lc| lc + CS::one(), |lc| lc + x);
        let mut ns = cs.namespace(|| "round");
        if self.0.is_multiple_of(2) {
            ns.enforce(|| "square", |lc| lc + x, |lc| lc + x, |lc| lc + y);
        } else {
            ns.enforce(|| "square", |lc| lc + x, |lc| lc + CS::one(), |lc| lc + y);
        }
        Ok(())
    }
}

#[test]
fn a_circuit_whose_constraints_follow_its_witness_is_refused_naming_the_constraint() {
    let pool = heap_pool(1 << 20);
    let r1cs = compile(Shifty(2)).unwrap();
    let shape = crate::circuit::CircuitShape::of(Shifty(2)).unwrap();
    synthesis::synthesize_compiled(Shifty(4), &r1cs, &shape, &pool, true).unwrap();
    let err = synthesis::synthesize_compiled(Shifty(3), &r1cs, &shape, &pool, true).unwrap_err();
    match &err {
        SynthesisError::Witness(WitnessError::Structure(m)) => {
            assert_eq!(m.index, 1);
            assert_eq!(m.name, "round/square");
            assert!(m.what.contains("term 0 of B"), "{}", m.what);
        }
        other => panic!("expected a structure mismatch, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("first at constraint 1 (round/square)"),
        "{text}"
    );
}

/// Enforces one more constraint when its witness says so.
struct Longer(bool);

impl Circuit<Scalar> for Longer {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), BpError> {
        let x = cs.alloc(|| "x", || Ok(Scalar::from(3)))?;
        cs.enforce(|| "one", |lc| lc + x, |lc| lc + CS::one(), |lc| lc + x);
        if self.0 {
            cs.enforce(|| "two", |lc| lc + x, |lc| lc + CS::one(), |lc| lc + x);
        }
        Ok(())
    }
}

#[test]
fn a_circuit_with_fewer_or_more_constraints_than_recorded_is_refused_even_unchecked() {
    let pool = heap_pool(1 << 20);
    let r1cs = compile(Longer(true)).unwrap();
    let shape = crate::circuit::CircuitShape::of(Longer(true)).unwrap();
    for check in [true, false] {
        let err =
            synthesis::synthesize_compiled(Longer(false), &r1cs, &shape, &pool, check).unwrap_err();
        assert!(err.to_string().contains("constraints"), "{err}");
    }
    let short = compile(Longer(false)).unwrap();
    let err =
        synthesis::synthesize_compiled(Longer(true), &short, &shape, &pool, false).unwrap_err();
    assert!(
        err.to_string().contains("differ") || err.to_string().contains("larger"),
        "{err}"
    );
}

#[test]
fn recordings_for_another_shape_are_refused_before_synthesis() {
    let pool = heap_pool(1 << 26);
    let r1cs = compile(circuit::shape_circuit(CircuitKind::Chain, 256).unwrap()).unwrap();
    let shape = circuit::shape(CircuitKind::Chain, 512).unwrap();
    let (c, _) = circuit::bundled(CircuitKind::Chain, 512, 1).unwrap();
    let err = synthesis::synthesize_compiled(c, &r1cs, &shape, &pool, false).unwrap_err();
    assert!(matches!(err, SynthesisError::Mismatch { .. }), "{err}");
}

#[test]
fn the_file_round_trips_and_refuses_damage() {
    let dir = tempfile::tempdir().unwrap();
    let r1cs = compile(circuit::shape_circuit(CircuitKind::Sha256, 1 << 15).unwrap()).unwrap();
    assert!(
        r1cs.coefficients().len() > 2,
        "sha256 has coefficients besides ±1"
    );
    let path = file::path_for(&dir.path().join("sha256-32768.params"));
    assert!(path.to_string_lossy().ends_with("sha256-32768.params.r1cs"));
    file::save(&r1cs, &path).unwrap();
    let back = file::load(&path).unwrap();
    assert_eq!(back.digest, r1cs.digest);
    assert_eq!(back.matrices(), r1cs.matrices());
    assert_eq!(back.a_aux_density, r1cs.a_aux_density);
    assert_eq!(back.b_aux_density, r1cs.b_aux_density);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");

    let bytes = std::fs::read(&path).unwrap();
    // One term's coefficient index changed to another valid one.
    let mut altered = bytes.clone();
    let last = altered.len() - 4;
    altered[last] ^= 1;
    std::fs::write(&path, &altered).unwrap();
    let err = file::load(&path).unwrap_err();
    assert!(matches!(err, FileError::Digest { .. }), "{err}");
    assert!(err.to_string().contains("damaged or was altered"), "{err}");

    std::fs::write(&path, &bytes[..bytes.len() - 9]).unwrap();
    let err = file::load(&path).unwrap_err();
    assert!(matches!(err, FileError::Invalid { .. }), "{err}");

    // A file of format 1 (its digest hashed the matrices straight through)
    // is refused by name, so its user records it again.
    let mut v1 = bytes.clone();
    v1[7] = 1;
    std::fs::write(&path, &v1).unwrap();
    let err = file::load(&path).unwrap_err().to_string();
    assert!(err.contains("older format"), "{err}");

    // A header that claims more than the file holds is refused before any
    // allocation of that size.
    let mut huge = bytes.clone();
    huge[40 + 24..40 + 32].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&path, &huge).unwrap();
    assert!(matches!(
        file::load(&path).unwrap_err(),
        FileError::Invalid { .. }
    ));

    std::fs::write(&path, b"not a recording").unwrap();
    assert!(file::load(&path)
        .unwrap_err()
        .to_string()
        .contains("shorter than the header"));
    let missing = file::load(&dir.path().join("absent.r1cs")).unwrap_err();
    assert!(matches!(
        missing,
        FileError::Io {
            action: "opening",
            ..
        }
    ));
}

#[test]
fn evaluate_refuses_assignments_of_another_size() {
    let r1cs = compile(Longer(true)).unwrap();
    let mut out = vec![Scalar::ZERO; 8];
    let (mut b, mut c) = (out.clone(), out.clone());
    let err = evaluate(&r1cs, &[Scalar::ONE], &[], &mut out, &mut b, &mut c).unwrap_err();
    assert_eq!(err.want_aux, 1);
}

/// The SHA-256 circuit's witness in pieces, on pools of 1 to 4 threads
/// (so 1 to 4 pieces, at most one a block), is the whole circuit's,
/// value for value, and so are a, b, c from it.
#[test]
fn sha256_witness_in_pieces_equals_the_whole_circuits() {
    use crate::circuit::{CircuitShape, Sha256Circuit, SplitWitness};
    let pool = heap_pool(1 << 30);
    for blocks in [1usize, 3] {
        let shape = CircuitShape::of(Sha256Circuit::shape(blocks)).unwrap();
        let r1cs = compile(Sha256Circuit::shape(blocks)).unwrap();
        let plain =
            synthesis::synthesize(Sha256Circuit::from_seed(blocks, 5), &shape, &pool).unwrap();
        for threads in 1..=4 {
            let circuit = Sha256Circuit::from_seed(blocks, 5);
            assert_eq!(circuit.pieces(threads), threads.min(blocks));
            let split = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    synthesis::synthesize_compiled_split(circuit, &r1cs, &shape, &pool, false)
                })
                .unwrap();
            same(&plain, &split);
        }
    }
    // Without a witness there is nothing to start later pieces from.
    assert_eq!(Sha256Circuit::shape(3).pieces(4), 1);
}

/// A recording of a shorter circuit refuses the pieces of a longer one by
/// their counts, and a piece never writes past the recording's bounds.
#[test]
fn pieces_against_another_circuits_recording_are_refused() {
    use crate::circuit::{CircuitShape, Sha256Circuit};
    let pool = heap_pool(1 << 30);
    let shape = CircuitShape::of(Sha256Circuit::shape(3)).unwrap();
    let short = compile(Sha256Circuit::shape(2)).unwrap();
    let long = compile(Sha256Circuit::shape(3)).unwrap();
    let bufs = synthesis::SynthesisBuffers::checkout(&pool, "test", &shape, synthesis::AbcAt::Host)
        .unwrap();
    let (mut inputs, mut aux) = bufs.into_assignments();
    let err = assign_split(
        &Sha256Circuit::from_seed(3, 1),
        3,
        &short,
        &mut inputs,
        &mut aux,
        false,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            WitnessError::TooLarge { .. } | WitnessError::Structure(_)
        ),
        "{err}"
    );
    let err = assign_split(
        &Sha256Circuit::from_seed(2, 1),
        2,
        &long,
        &mut inputs,
        &mut aux,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("the recording"), "{err}");
}

/// A preamble (an input and two aux values) and then `sections` sections of
/// three constraints each over it, like a PoRep partition's challenges; a
/// piece is the circuit over some of its sections, so it repeats the
/// preamble. `honest == false` gives a preamble that depends on the piece's
/// sections, which `assign_split` must refuse.
#[derive(Clone)]
struct Sections {
    seed: u64,
    sections: std::ops::Range<u64>,
    honest: bool,
}

impl Sections {
    fn synthesize_sections<CS: ConstraintSystem<Scalar>>(
        &self,
        sections: std::ops::Range<u64>,
        cs: &mut CS,
    ) -> Result<(), BpError> {
        let tag = if self.honest { 0 } else { sections.start };
        let p = Scalar::from(self.seed + tag);
        let input = cs.alloc_input(|| "p", || Ok(p))?;
        let q = cs.alloc(|| "q", || Ok(p.square()))?;
        cs.enforce(|| "q", |lc| lc + input, |lc| lc + input, |lc| lc + q);
        let r = cs.alloc(|| "r", || Ok(p + Scalar::ONE))?;
        cs.enforce(
            || "r",
            |lc| lc + input + CS::one(),
            |lc| lc + CS::one(),
            |lc| lc + r,
        );
        for s in sections {
            let v = p * Scalar::from(s + 2);
            let x = cs.alloc(|| "x", || Ok(v))?;
            let y = cs.alloc(|| "y", || Ok(v.square()))?;
            cs.enforce(
                || "x",
                |lc| lc + input,
                |lc| lc + (Scalar::from(s + 2), CS::one()),
                |lc| lc + x,
            );
            cs.enforce(|| "y", |lc| lc + x, |lc| lc + x, |lc| lc + y);
            cs.enforce(
                || "qr",
                |lc| lc + q,
                |lc| lc + r,
                |lc| lc + (p.square() * (p + Scalar::ONE), CS::one()),
            );
            let out = cs.alloc_input(|| "out", || Ok(v.square() + Scalar::ONE))?;
            cs.enforce(
                || "out",
                |lc| lc + y + CS::one(),
                |lc| lc + CS::one(),
                |lc| lc + out,
            );
        }
        Ok(())
    }
}

impl Circuit<Scalar> for Sections {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), BpError> {
        self.synthesize_sections(self.sections.clone(), cs)
    }
}

impl crate::circuit::SplitWitness for Sections {
    fn repeats_preamble(&self) -> bool {
        true
    }

    fn pieces(&self, max: usize) -> usize {
        max.clamp(1, self.sections.clone().count())
    }

    fn synthesize_piece<CS: ConstraintSystem<Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), BpError> {
        let r = crate::circuit::split::piece_range(self.sections.clone().count(), piece, pieces);
        self.synthesize_sections(r.start as u64..r.end as u64, cs)
    }
}

#[test]
fn pieces_that_repeat_a_preamble_drop_the_repeats_and_refuse_a_preamble_that_differs() {
    use crate::circuit::CircuitShape;
    let pool = heap_pool(1 << 26);
    let honest = Sections {
        seed: 11,
        sections: 0..7,
        honest: true,
    };
    let shape = CircuitShape::of(honest.clone()).unwrap();
    let r1cs = compile(honest.clone()).unwrap();
    let whole = synthesis::synthesize(honest.clone(), &shape, &pool).unwrap();
    for threads in 1..=4 {
        let split = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                synthesis::synthesize_compiled_split(honest.clone(), &r1cs, &shape, &pool, false)
            })
            .unwrap();
        same(&whole, &split);
    }
    let bufs = synthesis::SynthesisBuffers::checkout(&pool, "test", &shape, synthesis::AbcAt::Host)
        .unwrap();
    let (mut inputs, mut aux) = bufs.into_assignments();
    let dishonest = Sections {
        honest: false,
        ..honest
    };
    let err = assign_split(&dishonest, 3, &r1cs, &mut inputs, &mut aux, false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("piece 1 does not start with the first piece's"),
        "{err}"
    );
}

#[test]
fn a_recording_made_in_pieces_is_the_whole_circuits_recording() {
    use crate::circuit::CircuitShape;
    let circuit = Sections {
        seed: 5,
        sections: 0..7,
        honest: true,
    };
    let shape = CircuitShape::of(circuit.clone()).unwrap();
    let whole = compile(circuit.clone()).unwrap();
    // More pieces than sections too: the last pieces hold the preamble only.
    for pieces in [1, 2, 3, 4, 7, 9] {
        let split = compile_split(&circuit, pieces, &shape).unwrap();
        assert_eq!(split.digest, whole.digest, "{pieces} pieces");
        assert_eq!(
            (split.num_inputs, split.num_aux, split.num_constraints),
            (whole.num_inputs, whole.num_aux, whole.num_constraints)
        );
        assert_eq!(split.a_aux_density, whole.a_aux_density);
        assert_eq!(split.b_input_density, whole.b_input_density);
    }
    // Another circuit's shape: the pieces do not add up to it.
    let other = CircuitShape {
        num_aux: shape.num_aux + 1,
        ..shape
    };
    let err = compile_split(&circuit, 3, &other).unwrap_err().to_string();
    assert!(err.contains("not one preamble repeated"), "{err}");
}

/// The checked pass in pieces, against a recording made in the same pieces:
/// the whole circuit's values, and a constraint that differs from the
/// recording named at the row the whole circuit has it at, in whichever
/// piece it is.
#[test]
fn a_checked_pass_in_pieces_gives_the_whole_values_and_names_a_differing_row_where_it_is() {
    use crate::circuit::split::piece_range;
    use crate::circuit::{CircuitShape, SplitWitness};
    let pool = heap_pool(1 << 26);
    let honest = Sections {
        seed: 11,
        sections: 0..7,
        honest: true,
    };
    let shape = CircuitShape::of(honest.clone()).unwrap();
    let whole = synthesis::synthesize(honest.clone(), &shape, &pool).unwrap();
    for threads in 1..=4 {
        let run = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let pieces = honest.pieces(threads);
        let r1cs = run
            .install(|| compile_split(&honest, pieces, &shape))
            .unwrap();
        assert!(can_check_in_pieces(&r1cs, pieces));
        let split = run
            .install(|| {
                synthesis::synthesize_compiled_split(honest.clone(), &r1cs, &shape, &pool, true)
            })
            .unwrap();
        same(&whole, &split);
        let ran = split.parts.expect("parts of a compiled synthesis").pieces;
        assert_eq!(ran, pieces, "{threads} threads");
    }
    // A recording made whole has no layout: checked, the pieces are refused
    // (the synthesis then runs the whole circuit).
    let r1cs = compile(honest.clone()).unwrap();
    assert!(!can_check_in_pieces(&r1cs, 3));
    let bufs = synthesis::SynthesisBuffers::checkout(&pool, "test", &shape, synthesis::AbcAt::Host)
        .unwrap();
    let (mut inputs, mut aux) = bufs.into_assignments();
    let err = assign_split(&honest, 3, &r1cs, &mut inputs, &mut aux, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("needs a recording made in as many pieces"),
        "{err}"
    );
    // Piece 1 of this circuit has another value of `p` than the recording,
    // which the `qr` constraint's coefficient holds: named at the row of
    // piece 1's first section's `qr` in the whole circuit (2 preamble rows,
    // then 4 a section: x, y, qr, out).
    let r1cs = compile_split(&honest, 3, &shape).unwrap();
    let dishonest = Sections {
        honest: false,
        ..honest
    };
    let err = assign_split(&dishonest, 3, &r1cs, &mut inputs, &mut aux, true).unwrap_err();
    let first = piece_range(7, 1, 3).start;
    match err {
        WitnessError::Structure(m) => {
            assert_eq!(m.index, 2 + 4 * first + 2, "{m}");
            assert!(m.name.ends_with("qr"), "{m}");
            assert!(m.what.contains("term 0 of C"), "{m}");
        }
        other => panic!("{other}"),
    }
}
