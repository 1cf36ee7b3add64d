//! Which variables of a query the parameters keep bases for, as bellperson tracks them.

/// Which variables of one query (A or B, inputs or aux) have a non-zero
/// coefficient somewhere: those are the ones whose bases the parameters keep.
/// Mirrors bellperson's `DensityTracker`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Density {
    words: Vec<u64>,
    len: usize,
    total: usize,
}

impl Density {
    pub(crate) fn with_capacity(bits: usize) -> Self {
        Density {
            words: Vec::with_capacity(bits.div_ceil(64)),
            len: 0,
            total: 0,
        }
    }

    /// `len` tracked variables, none set yet.
    pub(crate) fn with_len(len: usize) -> Self {
        Density {
            words: vec![0; len.div_ceil(64)],
            len,
            total: 0,
        }
    }

    pub(crate) fn add_element(&mut self) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        self.len += 1;
    }

    #[inline]
    pub(crate) fn inc(&mut self, i: usize) {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if let Some(word) = self.words.get_mut(w) {
            if *word & b == 0 {
                *word |= b;
                self.total += 1;
            }
        }
    }

    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of tracked variables.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of variables set (the number of bases the parameters hold).
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether every variable is set (then no compaction is needed).
    pub fn is_full(&self) -> bool {
        self.total == self.len
    }
}
