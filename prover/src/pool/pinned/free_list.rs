//! One slab's free space: the extents not carved out, kept sorted by offset
//! and coalesced, so a returned buffer merges with free neighbours and a
//! slab whose buffers all came back is one extent again (and can go back to
//! the system whole).

/// Free extents (`offset`, `len`) of one slab, sorted, never adjacent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeList {
    len: usize,
    free: Vec<(usize, usize)>,
}

impl FreeList {
    /// All of a slab of `len` bytes free.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            free: if len > 0 { vec![(0, len)] } else { Vec::new() },
        }
    }

    /// Whether nothing is carved out.
    pub fn is_whole(&self) -> bool {
        self.free.first() == Some(&(0, self.len))
    }

    /// Bytes not carved out.
    pub fn free_bytes(&self) -> usize {
        self.free.iter().map(|(_, l)| l).sum()
    }

    /// The smallest free extent of at least `bytes`: its index and length.
    pub fn best_fit(&self, bytes: usize) -> Option<(usize, usize)> {
        self.free
            .iter()
            .enumerate()
            .filter(|(_, (_, l))| *l >= bytes)
            .min_by_key(|(_, (_, l))| *l)
            .map(|(i, (_, l))| (i, *l))
    }

    /// Carves `bytes` off the front of extent `index` (from [`best_fit`]),
    /// returning the offset of the carved range.
    ///
    /// [`best_fit`]: Self::best_fit
    pub fn carve(&mut self, index: usize, bytes: usize) -> usize {
        let (offset, len) = self.free[index];
        debug_assert!(bytes <= len, "carving {bytes} from an extent of {len}");
        if bytes >= len {
            self.free.remove(index);
        } else {
            self.free[index] = (offset + bytes, len - bytes);
        }
        offset
    }

    /// Puts `offset..offset + bytes` back, merging it with free neighbours.
    pub fn give(&mut self, offset: usize, bytes: usize) {
        let at = self.free.partition_point(|(o, _)| *o < offset);
        debug_assert!(
            at == 0 || self.free[at - 1].0 + self.free[at - 1].1 <= offset,
            "range returned twice"
        );
        let joins_prev = at > 0 && self.free[at - 1].0 + self.free[at - 1].1 == offset;
        let joins_next = at < self.free.len() && offset + bytes == self.free[at].0;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.free[at - 1].1 += bytes + self.free[at].1;
                self.free.remove(at);
            }
            (true, false) => self.free[at - 1].1 += bytes,
            (false, true) => self.free[at] = (offset, bytes + self.free[at].1),
            (false, false) => self.free.insert(at, (offset, bytes)),
        }
    }

    /// The free extents, in offset order.
    pub fn extents(&self) -> &[(usize, usize)] {
        &self.free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carving_and_returning_in_any_order_coalesces_to_one_extent() {
        let mut f = FreeList::new(10);
        let offsets: Vec<usize> = (0..5)
            .map(|_| {
                let (i, _) = f.best_fit(2).unwrap();
                f.carve(i, 2)
            })
            .collect();
        assert_eq!(offsets, [0, 2, 4, 6, 8]);
        assert!(f.best_fit(1).is_none());
        for &o in &[4, 0, 8, 2] {
            f.give(o, 2);
        }
        assert_eq!(f.extents(), &[(0, 6), (8, 2)]);
        assert!(!f.is_whole());
        f.give(6, 2);
        assert!(f.is_whole());
        assert_eq!(f.free_bytes(), 10);
    }

    #[test]
    fn best_fit_takes_the_smallest_adequate_hole() {
        let mut f = FreeList::new(20);
        for _ in 0..20 {
            let (i, _) = f.best_fit(1).unwrap();
            f.carve(i, 1);
        }
        // Holes of 5, 2 and 3 bytes at 0, 8 and 14.
        for o in (0..5).chain(8..10).chain(14..17) {
            f.give(o, 1);
        }
        assert_eq!(f.extents(), &[(0, 5), (8, 2), (14, 3)]);
        let (i, len) = f.best_fit(3).unwrap();
        assert_eq!((f.carve(i, 3), len), (14, 3));
        let (i, len) = f.best_fit(2).unwrap();
        assert_eq!((f.carve(i, 2), len), (8, 2));
        assert_eq!(f.extents(), &[(0, 5)]);
    }
}
