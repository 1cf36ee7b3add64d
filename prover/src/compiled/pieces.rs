//! The witness-only pass of a circuit that comes in pieces: each piece on a
//! core of its own into a buffer of its own, then the buffers copied into the
//! pinned assignment in piece order.
//!
//! SHA-256's witness pass is its gadgets' own code (building and dropping
//! linear combinations term by term), which no constraint system makes
//! cheaper; what is ours to take is running it on every core. The pieces'
//! constraints are not the circuit's (see `circuit::split`), so this pass
//! never checks structure: the checked pass runs the whole circuit.

use super::error::StructureMismatch;
use super::matrix::CompiledR1cs;
use super::witness::WitnessError;
use crate::circuit::{unnamed_root, SplitWitness};
use crate::pool::PinnedVec;
use bellperson::{ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

/// Runs `pieces` pieces of `circuit` on the rayon pool and writes their
/// assignments into `inputs` (ONE first) and `aux` (both cleared first).
/// The counts are compared with the recording as the whole pass compares them.
pub fn assign_split<C: SplitWitness>(
    circuit: &C,
    pieces: usize,
    r1cs: &CompiledR1cs,
    inputs: &mut PinnedVec<Scalar>,
    aux: &mut PinnedVec<Scalar>,
) -> Result<(), WitnessError> {
    let pieces = pieces.max(1);
    let done: Vec<Piece> = (0..pieces)
        .into_par_iter()
        .map(|p| {
            let mut piece = Piece::new(r1cs, pieces);
            let result = circuit.synthesize_piece(p, pieces, &mut piece);
            match (piece.error.take(), result) {
                (Some(e), _) => Err(e),
                (None, Err(e)) => Err(WitnessError::Circuit(e)),
                (None, Ok(())) => Ok(piece),
            }
        })
        .collect::<Result<_, _>>()?;
    let preamble = if circuit.repeats_preamble() {
        preamble(&done, r1cs)?
    } else {
        Preamble::default()
    };
    // Pieces after the first drop their copy of the preamble.
    let skip = |k: usize, p: &Piece| {
        if k == 0 {
            (0, 0, 0)
        } else {
            (
                preamble.inputs.min(p.inputs.len()),
                preamble.aux.min(p.aux.len()),
                preamble.constraints.min(p.constraints),
            )
        }
    };
    let (mut num_inputs, mut num_aux, mut constraints) = (1, 0, 0);
    for (k, p) in done.iter().enumerate() {
        let (i, a, c) = skip(k, p);
        num_inputs += p.inputs.len() - i;
        num_aux += p.aux.len() - a;
        constraints += p.constraints - c;
    }
    // bellperson's `input · 0 = 0` constraints close the recording.
    let enforced = constraints + num_inputs;
    let counts = [
        ("inputs", num_inputs, r1cs.num_inputs),
        ("aux variables", num_aux, r1cs.num_aux),
        ("constraints", enforced, r1cs.num_constraints),
    ];
    for (what, got, recorded) in counts {
        if got != recorded {
            return Err(StructureMismatch {
                index: constraints.min(r1cs.num_constraints),
                name: "the end of the circuit".into(),
                what: format!("it has {got} {what}, the recording {recorded}"),
            }
            .into());
        }
    }
    inputs.clear();
    aux.clear();
    let full = |what, limit| WitnessError::TooLarge { what, limit };
    inputs
        .push(Scalar::ONE)
        .map_err(|_| full("inputs", inputs.capacity()))?;
    for (k, p) in done.iter().enumerate() {
        inputs
            .extend_from_slice(&p.inputs[skip(k, p).0..])
            .map_err(|_| full("inputs", inputs.capacity()))?;
    }
    aux.resize(num_aux, Scalar::ZERO)
        .map_err(|_| full("aux variables", aux.capacity()))?;
    let mut rest = aux.as_mut_slice();
    let mut targets = Vec::with_capacity(done.len());
    for (k, p) in done.iter().enumerate() {
        let from = &p.aux[skip(k, p).1..];
        let (head, tail) = rest.split_at_mut(from.len());
        targets.push((head, from));
        rest = tail;
    }
    targets
        .into_par_iter()
        .for_each(|(to, from)| to.copy_from_slice(from));
    Ok(())
}

/// What every piece allocated and enforced before its own share.
#[derive(Default)]
struct Preamble {
    inputs: usize,
    aux: usize,
    constraints: usize,
}

/// The preamble's length, from the pieces' counts against the recording's:
/// `n` pieces allocate the preamble `n` times, the whole circuit once. The
/// repeats must hold the first piece's values, else the circuit does not
/// come in such pieces and is refused rather than proved from a wrong
/// witness.
fn preamble(done: &[Piece], r1cs: &CompiledR1cs) -> Result<Preamble, WitnessError> {
    let repeats = done.len().saturating_sub(1);
    if repeats == 0 {
        return Ok(Preamble::default());
    }
    let refuse = |what: String| {
        WitnessError::from(StructureMismatch {
            index: 0,
            name: "the preamble its pieces repeat".into(),
            what,
        })
    };
    // Recorded: ONE, then the circuit's inputs; its constraints, then one
    // `input · 0 = 0` per input.
    let sums = [
        (
            "inputs",
            done.iter().map(|p| p.inputs.len()).sum::<usize>(),
            r1cs.num_inputs.saturating_sub(1),
        ),
        (
            "aux variables",
            done.iter().map(|p| p.aux.len()).sum::<usize>(),
            r1cs.num_aux,
        ),
        (
            "constraints",
            done.iter().map(|p| p.constraints).sum::<usize>(),
            r1cs.num_constraints.saturating_sub(r1cs.num_inputs),
        ),
    ];
    let mut len = [0usize; 3];
    for (slot, (what, pieces, whole)) in len.iter_mut().zip(sums) {
        let extra = pieces.checked_sub(whole).filter(|e| e % repeats == 0);
        *slot = extra.map(|e| e / repeats).ok_or_else(|| {
            refuse(format!(
                "{} pieces have {pieces} {what} together against the recording's {whole}, which \
                 is not the same preamble repeated",
                done.len()
            ))
        })?;
    }
    let [inputs, aux, constraints] = len;
    let first = &done[0];
    for (k, p) in done.iter().enumerate().skip(1) {
        let same = p.inputs.get(..inputs) == first.inputs.get(..inputs)
            && p.aux.get(..aux) == first.aux.get(..aux)
            && p.constraints >= constraints;
        if !same {
            return Err(refuse(format!(
                "piece {k} does not start with the first piece's {inputs} inputs and {aux} aux \
                 variables"
            )));
        }
    }
    Ok(Preamble {
        inputs,
        aux,
        constraints,
    })
}

/// One piece's assignment: allocation only, bounded by the recording.
struct Piece {
    inputs: Vec<Scalar>,
    aux: Vec<Scalar>,
    constraints: usize,
    max_inputs: usize,
    max_aux: usize,
    max_constraints: usize,
    error: Option<WitnessError>,
}

impl Piece {
    fn new(r1cs: &CompiledR1cs, pieces: usize) -> Self {
        Piece {
            inputs: Vec::new(),
            // About its share; the first piece, which allocates the
            // circuit's leading variables, grows past it.
            aux: Vec::with_capacity(r1cs.num_aux / pieces + 1024),
            constraints: 0,
            max_inputs: r1cs.num_inputs,
            max_aux: r1cs.num_aux,
            max_constraints: r1cs.num_constraints,
            error: None,
        }
    }

    fn fail(&mut self, what: &'static str, limit: usize) -> SynthesisError {
        if self.error.is_none() {
            self.error = Some(WitnessError::TooLarge { what, limit });
        }
        SynthesisError::PolynomialDegreeTooLarge
    }
}

impl ConstraintSystem<Scalar> for Piece {
    unnamed_root!();

    fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.aux.len() >= self.max_aux {
            return Err(self.fail("aux variables", self.max_aux));
        }
        self.aux.push(f()?);
        // Never read: nothing in this pass builds a linear combination.
        Ok(Variable::new_unchecked(Index::Aux(self.aux.len() - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.inputs.len() >= self.max_inputs {
            return Err(self.fail("inputs", self.max_inputs));
        }
        self.inputs.push(f()?);
        Ok(Variable::new_unchecked(Index::Input(self.inputs.len())))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, _: LA, _: LB, _: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        self.constraints += 1;
        if self.constraints > self.max_constraints {
            let limit = self.max_constraints;
            self.fail("constraints", limit);
        }
    }
}
