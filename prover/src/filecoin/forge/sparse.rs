//! Sparse Merkle trees: a tree of a sector's shape whose leaves are all one
//! default value but a few thousand, held as those leaves and the nodes
//! above them. Every other node is the root of an all-default subtree,
//! which depends only on its height and is computed once per height.
//!
//! A level's node is the proof crates' own hash of its children (the
//! hasher's `multi_node`, as their trees and `InclusionPath::root` compute
//! it), so the roots and paths here are those of the full tree.

use std::collections::BTreeMap;

use filecoin_hashers::{Domain, HashFunction, Hasher, PoseidonArity};
use storage_proofs_core::merkle::{MerkleProof, MerkleTreeTrait};

use super::error::ForgeError;

/// A node's children in a path: the siblings (in order, without the node)
/// and the node's position among them, as `MerkleProof::from_parts` takes.
pub(crate) type PathElement<D> = (Vec<D>, usize);

/// A Merkle tree over `leaves()` leaves, default but where set.
pub(crate) struct SparseTree<H: Hasher> {
    /// The arity of each level, from the leaves up.
    arities: Vec<usize>,
    /// `nodes[h]`: the nodes at height `h` (0: leaves) with a set leaf below.
    nodes: Vec<BTreeMap<usize, H::Domain>>,
    /// `defaults[h]`: the root of an all-default subtree of height `h`.
    defaults: Vec<H::Domain>,
}

/// The proof crates' hash of one node's children. Neither hasher uses the
/// height (it is there for the trait), so one value serves every level.
fn hash_children<H: Hasher>(children: &[H::Domain]) -> H::Domain {
    multi_node::<H::Function, H::Domain>(children)
}

/// `F`'s `multi_node` (of merkletree's `Algorithm`, which this crate does
/// not depend on: a bound's supertrait methods are callable on a type
/// parameter without naming the trait).
fn multi_node<F: HashFunction<D>, D: Domain>(children: &[D]) -> D {
    F::default().multi_node(children, 0)
}

/// The number of children per node of arity `A` (typenum's `to_usize`,
/// reached through the bound as [`multi_node`] is).
fn arity<A: PoseidonArity>() -> usize {
    A::to_usize()
}

impl<H: Hasher> SparseTree<H> {
    /// The tree over `leaves` (index → value) with `default` elsewhere and
    /// `arities` per level; an index past the last leaf is refused.
    pub(crate) fn new(
        arities: Vec<usize>,
        leaves: BTreeMap<usize, H::Domain>,
        default: H::Domain,
    ) -> Result<Self, ForgeError> {
        let width: usize = arities.iter().product();
        if let Some((&last, _)) = leaves.last_key_value() {
            if last >= width {
                return Err(ForgeError::Internal(format!(
                    "leaf {last} of a tree of {width} leaves"
                )));
            }
        }
        let mut nodes = vec![leaves];
        let mut defaults = vec![default];
        for (h, &arity) in arities.iter().enumerate() {
            let below = &nodes[h];
            let default_below = defaults[h];
            let mut level = BTreeMap::new();
            for parent in below.keys().map(|i| i / arity) {
                if level.contains_key(&parent) {
                    continue;
                }
                let children: Vec<H::Domain> = (0..arity)
                    .map(|j| *below.get(&(parent * arity + j)).unwrap_or(&default_below))
                    .collect();
                level.insert(parent, hash_children::<H>(&children));
            }
            defaults.push(hash_children::<H>(&vec![default_below; arity]));
            nodes.push(level);
        }
        Ok(SparseTree {
            arities,
            nodes,
            defaults,
        })
    }

    /// The number of leaves.
    pub(crate) fn leaves(&self) -> usize {
        self.arities.iter().product()
    }

    /// The node at height `h`, index `i`.
    fn node(&self, h: usize, i: usize) -> H::Domain {
        *self.nodes[h].get(&i).unwrap_or(&self.defaults[h])
    }

    pub(crate) fn root(&self) -> H::Domain {
        self.node(self.arities.len(), 0)
    }

    pub(crate) fn leaf(&self, i: usize) -> H::Domain {
        self.node(0, i)
    }

    /// Leaf `leaf`'s path to the root, from the leaves up.
    pub(crate) fn path(&self, leaf: usize) -> Vec<PathElement<H::Domain>> {
        let mut i = leaf;
        self.arities
            .iter()
            .enumerate()
            .map(|(h, &arity)| {
                let (parent, position) = (i / arity, i % arity);
                let siblings = (0..arity)
                    .filter(|&j| j != position)
                    .map(|j| self.node(h, parent * arity + j))
                    .collect();
                i = parent;
                (siblings, position)
            })
            .collect()
    }

    /// Leaf `leaf`'s inclusion proof in the crates' type for a tree of
    /// shape `A`, `B`, `C` (the levels above the base tree are the path's
    /// last elements, which `from_parts` splits off).
    pub(crate) fn proof<A, B, C>(&self, leaf: usize) -> Result<MerkleProof<H, A, B, C>, ForgeError>
    where
        A: 'static + PoseidonArity,
        B: 'static + PoseidonArity,
        C: 'static + PoseidonArity,
    {
        if leaf >= self.leaves() {
            return Err(ForgeError::Internal(format!(
                "leaf {leaf} of a tree of {} leaves",
                self.leaves()
            )));
        }
        Ok(MerkleProof::from_parts(
            self.leaf(leaf),
            self.root(),
            self.path(leaf),
        ))
    }
}

/// The arity of every level of a tree of shape `Tree` over `leaves` leaves,
/// from the leaves up: the base trees' levels, then one level of sub-tree
/// arity and one of top-tree arity where the shape has them.
pub(crate) fn shape_arities<Tree: MerkleTreeTrait>(
    leaves: usize,
) -> Result<Vec<usize>, ForgeError> {
    let base = arity::<Tree::Arity>();
    let above: Vec<usize> = [arity::<Tree::SubTreeArity>(), arity::<Tree::TopTreeArity>()]
        .into_iter()
        .filter(|&a| a > 0)
        .collect();
    let trees: usize = above.iter().product();
    let mut arities = uniform_arities(base, leaves / trees.max(1)).ok_or_else(|| {
        ForgeError::Internal(format!(
            "{leaves} leaves do not fill a tree of shape {}",
            Tree::display()
        ))
    })?;
    if trees * arities.iter().product::<usize>() != leaves {
        return Err(ForgeError::Internal(format!(
            "{leaves} leaves do not fill a tree of shape {}",
            Tree::display()
        )));
    }
    arities.extend(above);
    Ok(arities)
}

/// `arity` for each level of a full tree over `leaves` leaves; `None` if
/// `leaves` is not a power of `arity` (above 1).
pub(crate) fn uniform_arities(arity: usize, leaves: usize) -> Option<Vec<usize>> {
    if arity < 2 || leaves < 2 {
        return None;
    }
    let mut levels = Vec::new();
    let mut n = leaves;
    while n > 1 {
        if !n.is_multiple_of(arity) {
            return None;
        }
        n /= arity;
        levels.push(arity);
    }
    Some(levels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use filecoin_hashers::poseidon::PoseidonHasher;
    use filecoin_hashers::sha256::Sha256Hasher;
    use filecoin_hashers::Domain;
    use filecoin_proofs::constants::{SectorShape2KiB, SectorShape32GiB};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use storage_proofs_core::merkle::{generate_tree, MerkleProofTrait};

    type Poseidon = <PoseidonHasher as Hasher>::Domain;

    /// The crates' own tree over `leaves` random leaves of shape `Tree`,
    /// and ours over the same leaves (all set): same root, same proofs.
    fn same_as_the_crates<Tree: 'static + MerkleTreeTrait<Hasher = PoseidonHasher>>(leaves: usize)
    where
        Tree::Store: 'static,
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (data, theirs) = generate_tree::<Tree, _>(&mut rng, leaves, Some(dir.path().into()));
        let set: BTreeMap<usize, Poseidon> = data
            .chunks(32)
            .enumerate()
            .map(|(i, b)| (i, Poseidon::try_from_bytes(b).expect("leaf")))
            .collect();
        let ours = SparseTree::<PoseidonHasher>::new(
            shape_arities::<Tree>(leaves).expect("shape"),
            set,
            Poseidon::default(),
        )
        .expect("tree");
        assert_eq!(ours.root(), theirs.root());
        for i in [0, 1, leaves / 3, leaves - 1] {
            let mine = ours
                .proof::<Tree::Arity, Tree::SubTreeArity, Tree::TopTreeArity>(i)
                .expect("proof");
            // A level-cache tree keeps only its top rows: the cached proof rebuilds
            // the rest from the leaves, as the crates' C1 does.
            let real = theirs.gen_cached_proof(i, None).expect("their proof");
            assert!(mine.validate(i));
            assert_eq!(
                serde_json::to_string(&mine).expect("json"),
                serde_json::to_string(&real).expect("json"),
                "leaf {i}"
            );
        }
    }

    #[test]
    fn roots_and_proofs_are_those_of_the_crates_trees() {
        // A base tree, and a tree with sub-trees (32 GiB's shape, smaller).
        same_as_the_crates::<SectorShape2KiB>(64);
        same_as_the_crates::<SectorShape32GiB>(8 * 64);
        same_as_the_crates::<filecoin_proofs::constants::SectorShape64GiB>(2 * 8 * 64);
    }

    #[test]
    fn a_sparse_tree_equals_the_dense_one_with_default_leaves() {
        let arities = vec![8, 8, 2];
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let set: BTreeMap<usize, Poseidon> = [3usize, 64, 65, 127]
            .into_iter()
            .map(|i| (i, Poseidon::random(&mut rng)))
            .collect();
        let zero = Poseidon::default();
        let dense: BTreeMap<usize, Poseidon> = (0..128)
            .map(|i| (i, *set.get(&i).unwrap_or(&zero)))
            .collect();
        let sparse = SparseTree::<PoseidonHasher>::new(arities.clone(), set, zero).expect("tree");
        let full = SparseTree::<PoseidonHasher>::new(arities, dense, zero).expect("tree");
        assert_eq!(sparse.root(), full.root());
        for i in [0, 3, 64, 100, 127] {
            assert_eq!(sparse.path(i), full.path(i));
        }
        assert!(
            SparseTree::<PoseidonHasher>::new(vec![2], BTreeMap::from([(2, zero)]), zero).is_err()
        );
    }

    #[test]
    fn shapes_split_into_base_sub_and_top_levels() {
        assert_eq!(shape_arities::<SectorShape2KiB>(64).expect("2 KiB"), [8, 8]);
        assert_eq!(
            shape_arities::<SectorShape32GiB>(1 << 30)
                .expect("32 GiB")
                .len(),
            10
        );
        assert!(shape_arities::<SectorShape32GiB>(1 << 29).is_err());
        assert_eq!(uniform_arities(2, 64).map(|a| a.len()), Some(6));
        assert_eq!(uniform_arities(8, 63), None);
        let zero = <Sha256Hasher as Hasher>::Domain::default();
        let t = SparseTree::<Sha256Hasher>::new(vec![2; 5], BTreeMap::new(), zero).expect("tree");
        assert_eq!(t.leaves(), 32);
    }
}
