//! A ConstraintSystem that writes a/b/c evaluations and assignments straight into pinned buffers.
//!
//! It is bellperson's `ProvingAssignment` with its `Vec`s replaced by
//! fixed-capacity [`PinnedVec`]s checked out of the pool before synthesis, so
//! the buffers a device uploads from are the ones the circuit wrote: no copy
//! in between. Capacities come from a [`CircuitShape`]; a circuit that
//! outgrows them fails with [`SynthesisError::TooLarge`], never a panic.

use crate::budget::MemoryBudget;
use crate::circuit::{unnamed_root, CircuitShape, SplitWitness};
use crate::compiled::{self, CompiledR1cs};
pub use crate::density::Density;
use crate::lc::{self, UnknownVariable, Var};
use crate::pool::{
    pages_for_all, HeapAllocator, PinnedPool, PinnedVec, PinnedVecError, PoolError, PoolLimits,
};
use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, Variable};
use blstrs::Scalar;
use ff::Field;
use std::mem::size_of;
use std::sync::Arc;
use std::time::Instant;

/// Why synthesis failed.
#[derive(Debug, thiserror::Error)]
pub enum SynthesisError {
    #[error("circuit synthesis failed: {0}")]
    Circuit(#[from] bellperson::SynthesisError),
    #[error(
        "circuit is larger than its parameters: more than {limit} {what} (the parameters were \
         made for a different or smaller circuit)"
    )]
    TooLarge { what: &'static str, limit: usize },
    #[error(
        "circuit does not match its parameters: {what} is {got}, the parameters expect {expected}"
    )]
    Mismatch {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("checking out synthesis buffers ({bytes} bytes) from the pool: {source}")]
    Pool {
        bytes: usize,
        #[source]
        source: PoolError,
    },
    #[error("synthesis buffer: {0}")]
    Buffer(#[from] PinnedVecError),
    #[error("circuit is malformed: {0}")]
    Malformed(#[source] UnknownVariable),
    #[error(transparent)]
    Witness(#[from] compiled::WitnessError),
    #[error(transparent)]
    Eval(#[from] compiled::EvalShapeError),
}

/// Checked-out buffers sized for one shape, not yet written.
#[derive(Debug)]
pub struct SynthesisBuffers {
    a: PinnedVec<Scalar>,
    b: PinnedVec<Scalar>,
    c: PinnedVec<Scalar>,
    input_assignment: PinnedVec<Scalar>,
    aux_assignment: PinnedVec<Scalar>,
}

/// Where a partition's a, b, c are computed, which decides how many
/// domain-sized buffers its synthesis takes from the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbcAt {
    /// On the host: a, b, c each over the domain.
    Host,
    /// On the device, from the witness ([`synthesize_witness_split`]): `a`
    /// alone, where h comes back; `b` and `c` are empty. At 2^27 that is
    /// 8 GiB of page-locked memory less per partition in flight.
    Device,
}

/// The one layout of a partition's buffers, in bytes: a, b, c over the
/// domain (b and c empty where `abc` is on the device), then the input and
/// aux assignments (at least one element each). Synthesis checks these out;
/// admission counts the host layout through [`pool_bytes`], the most any
/// partition takes.
pub fn buffer_sizes(shape: &CircuitShape, abc: AbcAt) -> [usize; 5] {
    let m = shape.domain_size();
    let bc = match abc {
        AbcAt::Host => m,
        AbcAt::Device => 0,
    };
    [m, bc, bc, shape.num_inputs.max(1), shape.num_aux.max(1)]
        .map(|e| e.saturating_mul(size_of::<Scalar>()))
}

/// Bytes one partition of `shape` takes from the pool at most: its
/// [`buffer_sizes`] with a, b, c on the host, rounded as the pool rounds
/// them ([`crate::pool::pages_for`]).
pub fn pool_bytes(shape: &CircuitShape) -> u64 {
    pages_for_all(&buffer_sizes(shape, AbcAt::Host))
}

impl SynthesisBuffers {
    /// The input and aux assignment buffers alone (a witness pass's own tests).
    #[cfg(test)]
    pub(crate) fn into_assignments(self) -> (PinnedVec<Scalar>, PinnedVec<Scalar>) {
        (self.input_assignment, self.aux_assignment)
    }

    /// Checks out all five buffers at once (all or nothing, so two partitions
    /// never deadlock holding half each), as [`buffer_sizes`] lays them out.
    pub fn checkout(
        pool: &PinnedPool,
        who: &str,
        shape: &CircuitShape,
        abc: AbcAt,
    ) -> Result<Self, SynthesisError> {
        let sizes = buffer_sizes(shape, abc);
        let bytes = sizes.iter().fold(0usize, |sum, b| sum.saturating_add(*b));
        let bufs = pool
            .checkout_many(who, &sizes)
            .map_err(|source| SynthesisError::Pool { bytes, source })?;
        let mut it = bufs.into_iter();
        let mut next = || -> Result<PinnedVec<Scalar>, SynthesisError> {
            let buf = it.next().ok_or(SynthesisError::Pool {
                bytes,
                source: PoolError::Alloc {
                    allocator: pool.allocator_name(),
                    bytes,
                    reason: "pool returned fewer buffers than requested".into(),
                },
            })?;
            Ok(PinnedVec::new(buf)?)
        };
        Ok(SynthesisBuffers {
            a: next()?,
            b: next()?,
            c: next()?,
            input_assignment: next()?,
            aux_assignment: next()?,
        })
    }

    /// Total bytes held.
    pub fn bytes(&self) -> usize {
        [
            &self.a,
            &self.b,
            &self.c,
            &self.input_assignment,
            &self.aux_assignment,
        ]
        .iter()
        .map(|v| v.capacity() * size_of::<Scalar>())
        .sum()
    }
}

/// The result of synthesising one partition: everything the backend and
/// proof assembly need, in the buffers it was written to. `Send`, so it moves
/// from a synthesis thread to a device thread.
#[derive(Debug)]
pub struct Synthesized {
    /// Evaluations of the A, B, C polynomials over the domain, zero-padded to
    /// its size `m` (a power of two).
    pub a: PinnedVec<Scalar>,
    pub b: PinnedVec<Scalar>,
    pub c: PinnedVec<Scalar>,
    /// Input assignment, ONE first.
    pub input_assignment: PinnedVec<Scalar>,
    pub aux_assignment: PinnedVec<Scalar>,
    pub a_aux_density: Density,
    pub b_input_density: Density,
    pub b_aux_density: Density,
    /// Constraints written, bellperson's `x·0 = 0` input constraints included.
    pub num_constraints: usize,
    /// Milliseconds spent running the circuit (checkout excluded).
    pub synthesis_ms: f64,
    /// How `synthesis_ms` divides, where the circuit ran from compiled constraints.
    pub parts: Option<SynthesisParts>,
    /// Set where a, b, c were left to the device, to compute from these
    /// constraints and the assignments when proving ([`synthesize_witness_split`]);
    /// `a` is then an empty buffer of the domain's capacity, `b` and `c`
    /// have none.
    pub abc_from: Option<Arc<CompiledR1cs>>,
}

/// The two parts of a synthesis from compiled constraints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthesisParts {
    /// The witness-only pass (the circuit's `synthesize`, assignments only).
    pub witness_ms: f64,
    /// a, b, c from the compiled matrices.
    pub abc_ms: f64,
    /// Pieces the witness pass ran in, on as many threads (1: the whole
    /// circuit on one thread).
    pub pieces: usize,
}

impl Synthesized {
    /// Domain size m.
    pub fn domain(&self) -> usize {
        match &self.abc_from {
            // The recording's rows, padded as the parameters pad them.
            Some(r1cs) => r1cs.num_constraints.max(1).next_power_of_two(),
            None => self.a.len(),
        }
    }

    /// Whether a, b, c live in page-locked memory.
    pub fn pinned(&self) -> bool {
        self.a.page_locked() && self.b.page_locked() && self.c.page_locked()
    }
}

/// Checks buffers out of `pool` and synthesises `circuit` into them.
pub fn synthesize<C: Circuit<Scalar>>(
    circuit: C,
    shape: &CircuitShape,
    pool: &PinnedPool,
) -> Result<Synthesized, SynthesisError> {
    let bufs = SynthesisBuffers::checkout(pool, "synthesis", shape, AbcAt::Host)?;
    synthesize_into(circuit, shape, bufs)
}

/// A pool over ordinary heap memory with a budget of `bytes`, for tests and
/// one-shot CPU proving where page-locking buys nothing.
pub fn heap_pool(bytes: u64) -> PinnedPool {
    PinnedPool::new(
        Arc::new(HeapAllocator),
        MemoryBudget::new(bytes),
        PoolLimits::default(),
    )
}

/// Synthesises `circuit` into already checked-out buffers, exactly as
/// bellperson's prover does: allocate ONE as input 0, run the circuit, then
/// enforce `input_i · 0 = 0` for every input; pad a, b, c with zeros to the
/// domain size.
pub fn synthesize_into<C: Circuit<Scalar>>(
    circuit: C,
    shape: &CircuitShape,
    bufs: SynthesisBuffers,
) -> Result<Synthesized, SynthesisError> {
    let start = Instant::now();
    let mut cs = ProvingSystem::new(bufs, shape);
    cs.alloc_input(|| "", || Ok(Scalar::ONE))
        .map_err(|e| cs.explain(e))?;
    circuit.synthesize(&mut cs).map_err(|e| cs.explain(e))?;
    for i in 0..cs.input_assignment.len() {
        cs.enforce(|| "", |lc| lc + Variable(Index::Input(i)), |lc| lc, |lc| lc);
    }
    if let Some(e) = cs.overflow.take() {
        return Err(e);
    }
    let num_constraints = cs.a.len();
    same_counts([
        (
            "the number of inputs",
            cs.input_assignment.len(),
            shape.num_inputs,
        ),
        (
            "the number of aux variables",
            cs.aux_assignment.len(),
            shape.num_aux,
        ),
    ])?;
    let m = shape.domain_size();
    for v in [&mut cs.a, &mut cs.b, &mut cs.c] {
        v.resize(m, Scalar::ZERO)
            .map_err(|_| SynthesisError::TooLarge {
                what: "domain elements",
                limit: v.capacity(),
            })?;
    }
    Ok(Synthesized {
        a: cs.a,
        b: cs.b,
        c: cs.c,
        input_assignment: cs.input_assignment,
        aux_assignment: cs.aux_assignment,
        a_aux_density: cs.a_aux_density,
        b_input_density: cs.b_input_density,
        b_aux_density: cs.b_aux_density,
        num_constraints,
        synthesis_ms: start.elapsed().as_secs_f64() * 1e3,
        parts: None,
        abc_from: None,
    })
}

/// Checks buffers out of `pool` and synthesises `circuit` from its compiled
/// constraints: the witness-only pass, then a, b, c from the matrices. With
/// `check`, every constraint the circuit enforces is compared with the
/// recording first (see [`compiled::assign`]). The result is the one
/// [`synthesize`] gives, value for value.
pub fn synthesize_compiled<C: Circuit<Scalar>>(
    circuit: C,
    r1cs: &CompiledR1cs,
    shape: &CircuitShape,
    pool: &PinnedPool,
    check: bool,
) -> Result<Synthesized, SynthesisError> {
    let bufs = SynthesisBuffers::checkout(pool, "synthesis", shape, AbcAt::Host)?;
    synthesize_compiled_into(circuit, r1cs, shape, bufs, check)
}

/// [`synthesize_compiled`] into already checked-out buffers.
pub fn synthesize_compiled_into<C: Circuit<Scalar>>(
    circuit: C,
    r1cs: &CompiledR1cs,
    shape: &CircuitShape,
    bufs: SynthesisBuffers,
    check: bool,
) -> Result<Synthesized, SynthesisError> {
    from_compiled(r1cs, shape, bufs, 1, None, |inputs, aux| {
        compiled::assign(circuit, r1cs, inputs, aux, check)
    })
}

/// [`synthesize_compiled`] for a circuit that comes in pieces: its witness
/// pass runs one piece per core of the rayon pool
/// ([`compiled::assign_split`]); checked, so only where `r1cs` was
/// recorded in as many pieces ([`compiled::can_check_in_pieces`]). Checked
/// against any other recording, or where the circuit is one piece, the
/// whole circuit runs on this thread. The result is the same, value for
/// value.
pub fn synthesize_compiled_split<C: SplitWitness>(
    circuit: C,
    r1cs: &CompiledR1cs,
    shape: &CircuitShape,
    pool: &PinnedPool,
    check: bool,
) -> Result<Synthesized, SynthesisError> {
    split(circuit, r1cs, shape, pool, check, None)
}

/// [`synthesize_compiled_split`]'s witness pass alone: a, b, c are left to
/// the device ([`Synthesized::abc_from`]), for a backend whose
/// [`abc_off_host`](crate::backend::Backend::abc_off_host) holds for this
/// domain; only `a` is checked out at the domain's size (h comes back in
/// it), `b` and `c` are empty ([`AbcAt::Device`]).
pub fn synthesize_witness_split<C: SplitWitness>(
    circuit: C,
    r1cs: &Arc<CompiledR1cs>,
    shape: &CircuitShape,
    pool: &PinnedPool,
    check: bool,
) -> Result<Synthesized, SynthesisError> {
    split(circuit, r1cs, shape, pool, check, Some(r1cs.clone()))
}

fn split<C: SplitWitness>(
    circuit: C,
    r1cs: &CompiledR1cs,
    shape: &CircuitShape,
    pool: &PinnedPool,
    check: bool,
    defer: Option<Arc<CompiledR1cs>>,
) -> Result<Synthesized, SynthesisError> {
    let pieces = circuit.pieces(rayon::current_num_threads());
    let pieces = if check && !compiled::can_check_in_pieces(r1cs, pieces) {
        1
    } else {
        pieces
    };
    let abc = match defer {
        Some(_) => AbcAt::Device,
        None => AbcAt::Host,
    };
    let bufs = SynthesisBuffers::checkout(pool, "synthesis", shape, abc)?;
    if pieces <= 1 {
        return from_compiled(r1cs, shape, bufs, 1, defer, |inputs, aux| {
            compiled::assign(circuit, r1cs, inputs, aux, check)
        });
    }
    from_compiled(r1cs, shape, bufs, pieces, defer, |inputs, aux| {
        compiled::assign_split(&circuit, pieces, r1cs, inputs, aux, check)
    })
}

/// The compiled path after its checks: `witness` fills the assignments,
/// then a, b, c come from the matrices, here or (`defer`) when proving.
fn from_compiled(
    r1cs: &CompiledR1cs,
    shape: &CircuitShape,
    bufs: SynthesisBuffers,
    pieces: usize,
    defer: Option<Arc<CompiledR1cs>>,
    witness: impl FnOnce(
        &mut PinnedVec<Scalar>,
        &mut PinnedVec<Scalar>,
    ) -> Result<(), compiled::WitnessError>,
) -> Result<Synthesized, SynthesisError> {
    let m = shape.domain_size();
    if r1cs.num_constraints > m {
        return Err(SynthesisError::TooLarge {
            what: "constraints (domain size)",
            limit: m,
        });
    }
    same_counts([
        (
            "the compiled number of inputs",
            r1cs.num_inputs,
            shape.num_inputs,
        ),
        (
            "the compiled number of aux variables",
            r1cs.num_aux,
            shape.num_aux,
        ),
    ])?;
    let SynthesisBuffers {
        mut a,
        mut b,
        mut c,
        mut input_assignment,
        mut aux_assignment,
    } = bufs;
    let start = Instant::now();
    witness(&mut input_assignment, &mut aux_assignment)?;
    let witness_ms = start.elapsed().as_secs_f64() * 1e3;
    if defer.is_some() {
        for v in [&mut a, &mut b, &mut c] {
            v.clear();
        }
        return Ok(Synthesized {
            a,
            b,
            c,
            input_assignment,
            aux_assignment,
            a_aux_density: r1cs.a_aux_density.clone(),
            b_input_density: r1cs.b_input_density.clone(),
            b_aux_density: r1cs.b_aux_density.clone(),
            num_constraints: r1cs.num_constraints,
            synthesis_ms: witness_ms,
            parts: Some(SynthesisParts {
                witness_ms,
                abc_ms: 0.0,
                pieces,
            }),
            abc_from: defer,
        });
    }
    let t = Instant::now();
    for v in [&mut a, &mut b, &mut c] {
        v.clear();
        v.resize(m, Scalar::ZERO)
            .map_err(|_| SynthesisError::TooLarge {
                what: "domain elements",
                limit: v.capacity(),
            })?;
    }
    compiled::evaluate(
        r1cs,
        input_assignment.as_slice(),
        aux_assignment.as_slice(),
        a.as_mut_slice(),
        b.as_mut_slice(),
        c.as_mut_slice(),
    )?;
    let abc_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(Synthesized {
        a,
        b,
        c,
        input_assignment,
        aux_assignment,
        a_aux_density: r1cs.a_aux_density.clone(),
        b_input_density: r1cs.b_input_density.clone(),
        b_aux_density: r1cs.b_aux_density.clone(),
        num_constraints: r1cs.num_constraints,
        synthesis_ms: witness_ms + abc_ms,
        parts: Some(SynthesisParts {
            witness_ms,
            abc_ms,
            pieces,
        }),
        abc_from: None,
    })
}

/// The first of `(what, got, expected)` that differs, as a [`SynthesisError::Mismatch`].
fn same_counts<const N: usize>(
    counts: [(&'static str, usize, usize); N],
) -> Result<(), SynthesisError> {
    match counts
        .into_iter()
        .find(|(_, got, expected)| got != expected)
    {
        Some((what, got, expected)) => Err(SynthesisError::Mismatch {
            what,
            got,
            expected,
        }),
        None => Ok(()),
    }
}

/// bellperson's `ProvingAssignment` over fixed-capacity buffers.
struct ProvingSystem {
    a: PinnedVec<Scalar>,
    b: PinnedVec<Scalar>,
    c: PinnedVec<Scalar>,
    input_assignment: PinnedVec<Scalar>,
    aux_assignment: PinnedVec<Scalar>,
    a_aux_density: Density,
    b_input_density: Density,
    b_aux_density: Density,
    /// Capacity limits (the shape's, which may be below the buffers' rounded-up capacity).
    max_constraints: usize,
    max_inputs: usize,
    max_aux: usize,
    /// The first error `enforce` could not return (an overflow, an unknown
    /// variable): kept here and reported when the circuit returns.
    overflow: Option<SynthesisError>,
}

impl ProvingSystem {
    fn new(bufs: SynthesisBuffers, shape: &CircuitShape) -> Self {
        let SynthesisBuffers {
            mut a,
            mut b,
            mut c,
            mut input_assignment,
            mut aux_assignment,
        } = bufs;
        for v in [
            &mut a,
            &mut b,
            &mut c,
            &mut input_assignment,
            &mut aux_assignment,
        ] {
            v.clear();
        }
        ProvingSystem {
            a,
            b,
            c,
            input_assignment,
            aux_assignment,
            a_aux_density: Density::with_capacity(shape.num_aux),
            b_input_density: Density::with_capacity(shape.num_inputs),
            b_aux_density: Density::with_capacity(shape.num_aux),
            max_constraints: shape.domain_size(),
            max_inputs: shape.num_inputs,
            max_aux: shape.num_aux,
            overflow: None,
        }
    }

    /// Replaces the generic error an allocation returned after an overflow
    /// with the overflow itself.
    fn explain(&mut self, e: bellperson::SynthesisError) -> SynthesisError {
        self.overflow.take().unwrap_or(SynthesisError::Circuit(e))
    }

    fn too_large(&mut self, what: &'static str, limit: usize) -> bellperson::SynthesisError {
        if self.overflow.is_none() {
            self.overflow = Some(SynthesisError::TooLarge { what, limit });
        }
        bellperson::SynthesisError::PolynomialDegreeTooLarge
    }
}

/// bellperson's `eval_with_trackers`: Σ coeff·value, skipping zero
/// coefficients, marking the variables used in the trackers given. An
/// unallocated variable is refused by the one rule of [`lc::walk`].
#[inline]
fn eval(
    lc: &LinearCombination<Scalar>,
    mut input_density: Option<&mut Density>,
    mut aux_density: Option<&mut Density>,
    inputs: &[Scalar],
    aux: &[Scalar],
) -> Result<Scalar, UnknownVariable> {
    let mut acc = Scalar::ZERO;
    lc::walk(lc, inputs.len(), aux.len(), |var, coeff| {
        if bool::from(coeff.is_zero()) {
            return;
        }
        // `walk` checked the index against these very lengths.
        let (v, density, i) = match var {
            Var::Input(i) => (inputs[i], input_density.as_deref_mut(), i),
            Var::Aux(i) => (aux[i], aux_density.as_deref_mut(), i),
        };
        acc += if *coeff == Scalar::ONE { v } else { v * coeff };
        if let Some(d) = density {
            d.inc(i);
        }
    })?;
    Ok(acc)
}

impl ConstraintSystem<Scalar> for ProvingSystem {
    unnamed_root!();

    fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.aux_assignment.len() >= self.max_aux {
            return Err(self.too_large("aux variables", self.max_aux));
        }
        let value = f()?;
        if self.aux_assignment.push(value).is_err() {
            return Err(self.too_large("aux variables", self.max_aux));
        }
        self.a_aux_density.add_element();
        self.b_aux_density.add_element();
        Ok(Variable(Index::Aux(self.aux_assignment.len() - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.input_assignment.len() >= self.max_inputs {
            return Err(self.too_large("inputs", self.max_inputs));
        }
        let value = f()?;
        if self.input_assignment.push(value).is_err() {
            return Err(self.too_large("inputs", self.max_inputs));
        }
        self.b_input_density.add_element();
        Ok(Variable(Index::Input(self.input_assignment.len() - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        if self.a.len() >= self.max_constraints {
            self.too_large("constraints (domain size)", self.max_constraints);
            return;
        }
        let a = a(LinearCombination::zero());
        let b = b(LinearCombination::zero());
        let c = c(LinearCombination::zero());
        let inputs = self.input_assignment.as_slice();
        let aux = self.aux_assignment.as_slice();
        // Inputs have full density in A because of the x·0 = 0 constraints.
        let evaluated = eval(&a, None, Some(&mut self.a_aux_density), inputs, aux).and_then(|a| {
            let b = eval(
                &b,
                Some(&mut self.b_input_density),
                Some(&mut self.b_aux_density),
                inputs,
                aux,
            )?;
            Ok((a, b, eval(&c, None, None, inputs, aux)?))
        });
        let (a_res, b_res, c_res) = match evaluated {
            Ok(abc) => abc,
            Err(e) => {
                if self.overflow.is_none() {
                    self.overflow = Some(SynthesisError::Malformed(e));
                }
                return;
            }
        };
        // Capacity was checked above: a, b, c hold at least max_constraints.
        let pushed = self
            .a
            .push(a_res)
            .and(self.b.push(b_res))
            .and(self.c.push(c_res));
        if pushed.is_err() {
            self.too_large("constraints (domain size)", self.max_constraints);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x³ + x + 5 = out, with `out` public: three constraints.
    struct Cubic(Option<u64>);

    impl Circuit<Scalar> for Cubic {
        fn synthesize<CS: ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), bellperson::SynthesisError> {
            let x_val = self.0.map(Scalar::from);
            let x = cs.alloc(
                || "x",
                || x_val.ok_or(bellperson::SynthesisError::AssignmentMissing),
            )?;
            let x2_val = x_val.map(|x| x.square());
            let x2 = cs.alloc(
                || "x2",
                || x2_val.ok_or(bellperson::SynthesisError::AssignmentMissing),
            )?;
            cs.enforce(|| "x2", |lc| lc + x, |lc| lc + x, |lc| lc + x2);
            let x3_val = x2_val.zip(x_val).map(|(a, b)| a * b);
            let x3 = cs.alloc(
                || "x3",
                || x3_val.ok_or(bellperson::SynthesisError::AssignmentMissing),
            )?;
            cs.enforce(|| "x3", |lc| lc + x2, |lc| lc + x, |lc| lc + x3);
            let out_val = x3_val.zip(x_val).map(|(a, b)| a + b + Scalar::from(5));
            let out = cs.alloc_input(
                || "out",
                || out_val.ok_or(bellperson::SynthesisError::AssignmentMissing),
            )?;
            cs.enforce(
                || "out",
                |lc| lc + x3 + x + (Scalar::from(5), CS::one()),
                |lc| lc + CS::one(),
                |lc| lc + out,
            );
            Ok(())
        }
    }

    fn shape() -> CircuitShape {
        CircuitShape {
            num_inputs: 2,
            num_aux: 3,
            num_constraints: 3,
        }
    }

    #[test]
    fn writes_evaluations_assignments_and_densities_as_bellperson_does() {
        let pool = heap_pool(1 << 20);
        let syn = synthesize(Cubic(Some(3)), &shape(), &pool).unwrap();
        // 3 circuit constraints + 2 input constraints, padded to 8.
        assert_eq!(syn.num_constraints, 5);
        assert_eq!(syn.domain(), 8);
        let s = Scalar::from;
        assert_eq!(syn.input_assignment.as_slice(), &[s(1), s(35)]);
        assert_eq!(syn.aux_assignment.as_slice(), &[s(3), s(9), s(27)]);
        assert_eq!(
            syn.a.as_slice(),
            &[s(3), s(9), s(35), s(1), s(35), s(0), s(0), s(0)]
        );
        assert_eq!(
            syn.b.as_slice(),
            &[s(3), s(3), s(1), s(0), s(0), s(0), s(0), s(0)]
        );
        assert_eq!(
            syn.c.as_slice(),
            &[s(9), s(27), s(35), s(0), s(0), s(0), s(0), s(0)]
        );
        assert_eq!(syn.a_aux_density.total(), 3);
        assert!(syn.b_input_density.get(0) && !syn.b_input_density.get(1));
        assert!(syn.b_aux_density.get(0) && !syn.b_aux_density.get(1) && !syn.b_aux_density.get(2));
    }

    #[test]
    fn circuit_larger_than_its_shape_is_a_clear_error() {
        let pool = heap_pool(1 << 20);
        let small = CircuitShape {
            num_inputs: 2,
            num_aux: 2,
            num_constraints: 3,
        };
        let err = synthesize(Cubic(Some(3)), &small, &pool).unwrap_err();
        assert!(
            matches!(
                err,
                SynthesisError::TooLarge {
                    what: "aux variables",
                    limit: 2
                }
            ),
            "{err}"
        );
        let few = CircuitShape {
            num_inputs: 2,
            num_aux: 3,
            num_constraints: 0,
        };
        let err = synthesize(Cubic(Some(3)), &few, &pool).unwrap_err();
        assert!(
            matches!(err, SynthesisError::TooLarge { limit: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("larger than its parameters"));
    }

    #[test]
    fn missing_witness_is_reported_as_the_circuit_error() {
        let pool = heap_pool(1 << 20);
        let err = synthesize(Cubic(None), &shape(), &pool).unwrap_err();
        assert!(matches!(
            err,
            SynthesisError::Circuit(bellperson::SynthesisError::AssignmentMissing)
        ));
    }

    /// One constraint over an aux variable that was never allocated.
    struct Dangling;

    impl Circuit<Scalar> for Dangling {
        fn synthesize<CS: ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), bellperson::SynthesisError> {
            let x = cs.alloc(|| "x", || Ok(Scalar::ONE))?;
            let ghost = Variable::new_unchecked(Index::Aux(7));
            cs.enforce(|| "ghost", |lc| lc + x, |lc| lc + ghost, |lc| lc + x);
            Ok(())
        }
    }

    #[test]
    fn an_unallocated_variable_is_refused_as_setup_refuses_it() {
        // It used to read as zero here while setup called the circuit malformed.
        let pool = heap_pool(1 << 20);
        let shape = CircuitShape {
            num_inputs: 1,
            num_aux: 1,
            num_constraints: 1,
        };
        let err = synthesize(Dangling, &shape, &pool).unwrap_err();
        match &err {
            SynthesisError::Malformed(e) => assert_eq!(e.var, Var::Aux(7)),
            other => panic!("expected Malformed, got {other}"),
        }
        assert!(err.to_string().contains("never allocated"), "{err}");
    }

    #[test]
    fn admission_and_synthesis_agree_on_sizes_for_every_bundled_circuit_and_size() {
        // Admission reserves pool_bytes per partition; if it differed from
        // what a checkout really takes, jobs would be admitted that then
        // wait on the pool, or refused although they fit.
        let pool = heap_pool(u64::MAX);
        let mut checked = 0;
        for kind in crate::circuit::CircuitKind::ALL {
            let sizes: &[usize] = match kind {
                crate::circuit::CircuitKind::Chain => &[1 << 4, 100, 1 << 10, 1 << 14, 1 << 16],
                // Each size is one more block of the preimage (2^15 and up).
                crate::circuit::CircuitKind::Sha256 => &[1 << 15, 1 << 16],
            };
            for &size in sizes {
                let shape = crate::circuit::shape(kind, size).unwrap();
                let before = pool.stats().bytes_in_use;
                let bufs = SynthesisBuffers::checkout(&pool, "t", &shape, AbcAt::Host).unwrap();
                let taken = pool.stats().bytes_in_use - before;
                assert_eq!(taken, pool_bytes(&shape), "{kind} {size}");
                assert!(bufs.bytes() as u64 <= taken, "{kind} {size}");
                let cap = buffer_sizes(&shape, AbcAt::Host).iter().sum::<usize>();
                assert_eq!(bufs.bytes(), cap, "{kind} {size}");
                drop(bufs);
                // a, b, c on the device: b and c take nothing.
                let device = SynthesisBuffers::checkout(&pool, "t", &shape, AbcAt::Device).unwrap();
                let taken = pool.stats().bytes_in_use - before;
                let m = shape.domain_size() * size_of::<Scalar>();
                assert_eq!(device.b.capacity() + device.c.capacity(), 0);
                assert_eq!(device.a.capacity() * size_of::<Scalar>(), m);
                assert_eq!(
                    taken,
                    pages_for_all(&buffer_sizes(&shape, AbcAt::Device)),
                    "{kind} {size}"
                );
                // (An empty buffer still takes the pool's smallest unit.)
                let saved = 2 * (crate::pool::pages_for(m) - crate::pool::pages_for(0));
                assert_eq!(pool_bytes(&shape) - taken, saved, "{kind} {size}");
                drop(device);
                checked += 1;
            }
        }
        assert_eq!(checked, 7);
    }

    #[test]
    fn synthesized_moves_between_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<Synthesized>();
    }
}
