//! The namespace half of `ConstraintSystem` for systems that keep no names.
//!
//! Names only label variables and constraints for debugging. The shape
//! counter, the QAP evaluator and the proving system never read them, so each
//! is its own root and drops namespaces, as bellperson's `ProvingAssignment`
//! and `KeypairAssembly` do; the macro keeps that choice in one place.

/// Expands, inside an `impl ConstraintSystem<Scalar>` block, to
/// `type Root = Self` and namespace methods that do nothing.
macro_rules! unnamed_root {
    () => {
        type Root = Self;

        fn push_namespace<NR, N>(&mut self, _: N)
        where
            NR: Into<String>,
            N: FnOnce() -> NR,
        {
        }

        fn pop_namespace(&mut self) {}

        fn get_root(&mut self) -> &mut Self::Root {
            self
        }
    };
}

pub(crate) use unnamed_root;
