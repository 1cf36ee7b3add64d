//! The columns a forged C1 opens: one per challenged node and per parent
//! of one, each the node's label in every layer.
//!
//! A parent that is not challenged gets random labels. A challenged node's
//! label in layer `l` is computed from its parents' labels as the vanilla
//! verifier recomputes it (`LabelingProof`): its DRG parents' labels in
//! layer `l`, its expander parents' in layer `l - 1` (none in layer 1),
//! repeated to `TOTAL_PARENTS`. DRG parents come before the node, expander
//! parents are read a layer below, so filling layer by layer and, in a
//! layer, in ascending node order computes every parent's label before it
//! is read. Each node has exactly one column, wherever it appears.

use std::collections::{BTreeMap, BTreeSet};

use filecoin_hashers::{Domain, Hasher};
use rand::RngCore;
use sha2::{Digest, Sha256};
use storage_proofs_core::drgraph::Graph;
use storage_proofs_porep::stacked::{Column, LabelingProof, StackedBucketGraph, TOTAL_PARENTS};

use super::error::ForgeError;

/// A node's parents in the stacked graph, as the crates' prover lists them.
#[derive(Clone, Debug)]
pub(crate) struct Parents {
    pub drg: Vec<u32>,
    pub exp: Vec<u32>,
}

/// `node`'s parents in `graph` (its `base_parents` and `expanded_parents`).
pub(crate) fn parents_of<H: Hasher>(
    graph: &StackedBucketGraph<H>,
    node: u32,
) -> Result<Parents, ForgeError> {
    let mut drg = vec![0u32; graph.base_graph().degree()];
    graph
        .base_parents(node as usize, &mut drg)
        .map_err(|e| ForgeError::crates("computing a node's DRG parents", &e))?;
    let mut exp = vec![0u32; graph.expansion_degree()];
    graph
        .expanded_parents(node as usize, &mut exp)
        .map_err(|e| ForgeError::crates("computing a node's expander parents", &e))?;
    Ok(Parents { drg, exp })
}

/// Every opened node's labels, layers 1..=`layers` (row `l - 1` is layer `l`).
pub(crate) struct Columns<H: Hasher> {
    layers: usize,
    rows: BTreeMap<u32, Vec<H::Domain>>,
    parents: BTreeMap<u32, Parents>,
}

impl<H: Hasher> Columns<H> {
    /// The columns of `challenged` and their parents in `graph`, for
    /// `replica_id`: random labels for parents that are not challenged
    /// (drawn from `rng` in ascending node order, so a seed gives one
    /// result), computed ones for challenged nodes.
    pub(crate) fn forge(
        graph: &StackedBucketGraph<H>,
        replica_id: &H::Domain,
        layers: usize,
        challenged: &BTreeSet<u32>,
        rng: &mut impl RngCore,
    ) -> Result<Self, ForgeError> {
        let parents = challenged
            .iter()
            .map(|&c| parents_of(graph, c).map(|p| (c, p)))
            .collect::<Result<BTreeMap<_, _>, _>>()?;
        let opened: BTreeSet<u32> = parents
            .values()
            .flat_map(|p| p.drg.iter().chain(&p.exp).copied())
            .chain(challenged.iter().copied())
            .collect();
        let rows = opened
            .into_iter()
            .map(|node| {
                let column = if challenged.contains(&node) {
                    // Filled in below, layer by layer.
                    vec![H::Domain::default(); layers]
                } else {
                    (0..layers).map(|_| H::Domain::random(rng)).collect()
                };
                (node, column)
            })
            .collect();
        let mut columns = Columns {
            layers,
            rows,
            parents,
        };
        for layer in 1..=layers {
            for &node in challenged {
                let label = columns.labeling_proof(node, layer)?.label(replica_id);
                columns.set(node, layer, label)?;
            }
        }
        Ok(columns)
    }

    pub(crate) fn layers(&self) -> usize {
        self.layers
    }

    /// The number of opened nodes.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// A challenged node's parents.
    pub(crate) fn parents(&self, node: u32) -> Result<&Parents, ForgeError> {
        self.parents
            .get(&node)
            .ok_or_else(|| ForgeError::Internal(format!("node {node} is not challenged")))
    }

    /// An opened node's labels.
    pub(crate) fn rows(&self, node: u32) -> Result<&[H::Domain], ForgeError> {
        self.rows
            .get(&node)
            .map(Vec::as_slice)
            .ok_or_else(|| ForgeError::Internal(format!("node {node} has no column")))
    }

    fn label(&self, node: u32, layer: usize) -> Result<H::Domain, ForgeError> {
        Ok(self.rows(node)?[layer - 1])
    }

    fn set(&mut self, node: u32, layer: usize, label: H::Domain) -> Result<(), ForgeError> {
        let row = self
            .rows
            .get_mut(&node)
            .and_then(|r| r.get_mut(layer - 1))
            .ok_or_else(|| ForgeError::Internal(format!("node {node} has no layer {layer}")))?;
        *row = label;
        Ok(())
    }

    /// The labels a challenged node's label in `layer` is hashed from, as
    /// the crates' prover lists them: DRG parents in `layer`, then (above
    /// layer 1) expander parents in `layer - 1`, repeated to `TOTAL_PARENTS`.
    pub(crate) fn parent_labels(
        &self,
        node: u32,
        layer: usize,
    ) -> Result<Vec<H::Domain>, ForgeError> {
        let parents = self.parents(node)?;
        let mut labels = parents
            .drg
            .iter()
            .map(|&p| self.label(p, layer))
            .collect::<Result<Vec<_>, _>>()?;
        if layer > 1 {
            for &p in &parents.exp {
                labels.push(self.label(p, layer - 1)?);
            }
        }
        Ok(labels.iter().copied().cycle().take(TOTAL_PARENTS).collect())
    }

    /// The crates' labelling proof of `node` in `layer`.
    pub(crate) fn labeling_proof(
        &self,
        node: u32,
        layer: usize,
    ) -> Result<Labeling<H>, ForgeError> {
        Ok(Labeling {
            layer,
            node,
            parents: self.parent_labels(node, layer)?,
        })
    }

    /// The crates' hash of every opened column (tree_c's leaves).
    pub(crate) fn hashes(&self) -> Result<BTreeMap<usize, H::Domain>, ForgeError> {
        self.rows
            .iter()
            .map(|(&node, rows)| {
                let column = Column::<H>::new(node, rows.clone())
                    .map_err(|e| ForgeError::crates("building a column", &e))?;
                Ok((node as usize, column.hash().into()))
            })
            .collect()
    }

    /// Each challenged node's label in the last layer: its replica node,
    /// the data being zero (tree_r_last's leaves).
    pub(crate) fn last_labels(&self) -> Result<BTreeMap<usize, H::Domain>, ForgeError> {
        self.parents
            .keys()
            .map(|&node| Ok((node as usize, self.label(node, self.layers)?)))
            .collect()
    }
}

/// One label's inputs: the node, its layer and its parents' labels.
pub(crate) struct Labeling<H: Hasher> {
    layer: usize,
    node: u32,
    parents: Vec<H::Domain>,
}

impl<H: Hasher> Labeling<H> {
    /// The label, hashed as the crates' `LabelingProof` hashes it: SHA-256
    /// of the replica id, layer (4 bytes BE) and node (8 bytes BE) padded
    /// to 64 bytes, then the parents' labels; the top two bits cleared to
    /// stay in the field. (Their `create_label` is private: what this
    /// computes is checked against their `verify` by [`Self::into_proof`].)
    pub(crate) fn label(&self, replica_id: &H::Domain) -> H::Domain {
        let mut prefix = [0u8; 64];
        prefix[..32].copy_from_slice(AsRef::<[u8]>::as_ref(replica_id));
        prefix[32..36].copy_from_slice(&(self.layer as u32).to_be_bytes());
        prefix[36..44].copy_from_slice(&u64::from(self.node).to_be_bytes());
        let mut hasher = Sha256::new();
        hasher.update(prefix);
        for parent in &self.parents {
            hasher.update(AsRef::<[u8]>::as_ref(parent));
        }
        let mut repr: [u8; 32] = hasher.finalize().into();
        repr[31] &= 0b0011_1111;
        H::Domain::from(repr)
    }

    /// The crates' `LabelingProof`, checked to prove `label` for
    /// `replica_id` with their own verifier.
    pub(crate) fn into_proof(
        self,
        replica_id: &H::Domain,
        label: &H::Domain,
    ) -> Result<LabelingProof<H>, ForgeError> {
        let proof = LabelingProof::new(self.layer as u32, u64::from(self.node), self.parents);
        if !proof.verify(replica_id, label) {
            return Err(ForgeError::Internal(format!(
                "node {}'s label in layer {} is not the crates' label of its parents",
                self.node, self.layer
            )));
        }
        Ok(proof)
    }
}
