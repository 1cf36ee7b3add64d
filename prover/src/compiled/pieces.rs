//! The witness-only pass of a circuit that comes in pieces: each piece on a
//! core of its own into a buffer of its own, then the buffers copied into the
//! pinned assignment in piece order.
//!
//! SHA-256's witness pass is its gadgets' own code (building and dropping
//! linear combinations term by term), which no constraint system makes
//! cheaper; what is ours to take is running it on every core. A piece's
//! constraints are the circuit's only once laid where the join put them
//! (`circuit::split`, [`super::layout`]), so the checked pass runs in pieces
//! only against a recording made in the same pieces (it knows its layout);
//! against any other it runs the whole circuit on one thread.

use super::error::StructureMismatch;
use super::layout::{Counts, PieceLayout};
use super::matrix::{piece_column, CompiledR1cs};
use super::witness::{differs, WitnessError};
use crate::circuit::SplitWitness;
use crate::pool::PinnedVec;
use bellperson::{ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

/// Whether [`assign_split`] can check `pieces` pieces against `r1cs`: it
/// was recorded in as many pieces.
pub fn can_check_in_pieces(r1cs: &CompiledR1cs, pieces: usize) -> bool {
    r1cs.layout.as_ref().is_some_and(|l| l.pieces() == pieces)
}

/// Runs `pieces` pieces of `circuit` on the rayon pool and writes their
/// assignments into `inputs` (ONE first) and `aux` (both cleared first).
/// The counts are compared with the recording as the whole pass compares
/// them. With `check` (which needs [`can_check_in_pieces`]), every
/// constraint of every piece is compared with the row the join made of it,
/// as the whole pass's check compares them.
pub fn assign_split<C: SplitWitness>(
    circuit: &C,
    pieces: usize,
    r1cs: &CompiledR1cs,
    inputs: &mut PinnedVec<Scalar>,
    aux: &mut PinnedVec<Scalar>,
    check: bool,
) -> Result<(), WitnessError> {
    let pieces = pieces.max(1);
    let layout = match check {
        false => None,
        true if can_check_in_pieces(r1cs, pieces) => r1cs.layout.as_ref(),
        true => {
            return Err(StructureMismatch {
                index: 0,
                name: "the whole circuit".into(),
                what: format!(
                    "a check in {pieces} pieces needs a recording made in as many pieces"
                ),
            }
            .into())
        }
    };
    // Every piece runs to its end; the first failure in piece order is
    // reported, so the same circuit always names the same constraint.
    let done: Vec<Result<Piece, WitnessError>> = (0..pieces)
        .into_par_iter()
        .map(|p| {
            let check = layout.map(|layout| Check {
                r1cs,
                layout,
                piece: p,
                names: Vec::new(),
            });
            let mut piece = Piece::new(r1cs, pieces, check);
            let result = circuit.synthesize_piece(p, pieces, &mut piece);
            match (piece.error.take(), result) {
                (Some(e), _) => Err(e),
                (None, Err(e)) => Err(WitnessError::Circuit(e)),
                (None, Ok(())) => Ok(piece),
            }
        })
        .collect();
    let done: Vec<Piece> = done.into_iter().collect::<Result<_, _>>()?;
    if let Some(layout) = layout {
        same_sizes(&done, layout)?;
    }
    let preamble = if circuit.repeats_preamble() {
        preamble(&done, r1cs)?
    } else {
        Counts::default()
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

/// The preamble's length, from the pieces' counts against the recording's:
/// `n` pieces allocate the preamble `n` times, the whole circuit once. The
/// repeats must hold the first piece's values, else the circuit does not
/// come in such pieces and is refused rather than proved from a wrong
/// witness. The result is what every piece allocated and enforced before
/// its own share.
fn preamble(done: &[Piece], r1cs: &CompiledR1cs) -> Result<Counts, WitnessError> {
    let repeats = done.len().saturating_sub(1);
    if repeats == 0 {
        return Ok(Counts::default());
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
    Ok(Counts {
        inputs,
        aux,
        constraints,
    })
}

/// Each checked piece against what the recording's piece held.
fn same_sizes(done: &[Piece<'_>], layout: &PieceLayout) -> Result<(), WitnessError> {
    for (k, p) in done.iter().enumerate() {
        let got = Counts {
            inputs: p.inputs.len(),
            aux: p.aux.len(),
            constraints: p.constraints,
        };
        let recorded = layout.sizes[k];
        if got != recorded {
            return Err(StructureMismatch {
                index: layout.row(k, got.constraints.min(recorded.constraints)),
                name: format!("the end of piece {k}"),
                what: format!(
                    "it has {} inputs, {} aux variables and {} constraints, the recording's \
                     piece {} inputs, {} aux variables and {} constraints",
                    got.inputs,
                    got.aux,
                    got.constraints,
                    recorded.inputs,
                    recorded.aux,
                    recorded.constraints
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// What a checked piece compares its constraints with.
struct Check<'a> {
    r1cs: &'a CompiledR1cs,
    layout: &'a PieceLayout,
    piece: usize,
    /// Namespace path, for the mismatch's name.
    names: Vec<String>,
}

/// One piece's assignment: allocation only, bounded by the recording;
/// with a [`Check`], its constraints compared with the recording's.
struct Piece<'a> {
    inputs: Vec<Scalar>,
    aux: Vec<Scalar>,
    constraints: usize,
    max_inputs: usize,
    max_aux: usize,
    max_constraints: usize,
    check: Option<Check<'a>>,
    error: Option<WitnessError>,
}

impl<'a> Piece<'a> {
    fn new(r1cs: &CompiledR1cs, pieces: usize, check: Option<Check<'a>>) -> Self {
        Piece {
            inputs: Vec::new(),
            // About its share; the first piece, which allocates the
            // circuit's leading variables, grows past it.
            aux: Vec::with_capacity(r1cs.num_aux / pieces + 1024),
            constraints: 0,
            max_inputs: r1cs.num_inputs,
            max_aux: r1cs.num_aux,
            max_constraints: r1cs.num_constraints,
            check,
            error: None,
        }
    }

    /// Compares local constraint `row` with the recording's row it became.
    fn compare(
        &mut self,
        row: usize,
        name: String,
        lcs: [(&'static str, LinearCombination<Scalar>); 3],
    ) {
        let Some(check) = &self.check else {
            return;
        };
        let (k, layout, r1cs) = (check.piece, check.layout, check.r1cs);
        let global = layout.row(k, row);
        let mismatch = |what: String, names: &[String]| {
            let mut path = names.to_vec();
            path.push(name.clone());
            WitnessError::Structure(StructureMismatch {
                index: global,
                name: path.join("/"),
                what,
            })
        };
        if row >= layout.sizes[k].constraints {
            let e = mismatch(
                format!(
                    "piece {k} has more than the recording's piece's {} constraints",
                    layout.sizes[k].constraints
                ),
                &check.names,
            );
            self.error = Some(e);
            return;
        }
        // ONE is input 0 of a piece as of the whole circuit.
        let (inputs, aux) = (self.inputs.len() + 1, self.aux.len());
        let matrices = r1cs.matrices();
        for ((which, lc), matrix) in lcs.iter().zip(matrices) {
            let column = |c| piece_column(layout, k, c);
            match differs(r1cs, which, matrix, global, lc, inputs, aux, column) {
                Ok(None) => {}
                Ok(Some(what)) => {
                    let e = mismatch(what, &check.names);
                    self.error = Some(e);
                    return;
                }
                Err(e) => {
                    self.error = Some(WitnessError::Malformed(e));
                    return;
                }
            }
        }
    }

    fn fail(&mut self, what: &'static str, limit: usize) -> SynthesisError {
        if self.error.is_none() {
            self.error = Some(WitnessError::TooLarge { what, limit });
        }
        SynthesisError::PolynomialDegreeTooLarge
    }
}

impl ConstraintSystem<Scalar> for Piece<'_> {
    type Root = Self;

    fn push_namespace<NR, N>(&mut self, name: N)
    where
        NR: Into<String>,
        N: FnOnce() -> NR,
    {
        if let Some(check) = &mut self.check {
            check.names.push(name().into());
        }
    }

    fn pop_namespace(&mut self) {
        if let Some(check) = &mut self.check {
            check.names.pop();
        }
    }

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }

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
        // Local numbers: a checked piece maps them to the whole circuit's.
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

    fn enforce<A, AR, LA, LB, LC>(&mut self, name: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        let row = self.constraints;
        self.constraints += 1;
        if self.constraints > self.max_constraints {
            let limit = self.max_constraints;
            self.fail("constraints", limit);
        }
        if self.check.is_some() && self.error.is_none() {
            let zero = LinearCombination::zero;
            self.compare(
                row,
                name().into(),
                [("A", a(zero())), ("B", b(zero())), ("C", c(zero()))],
            );
        }
    }
}
