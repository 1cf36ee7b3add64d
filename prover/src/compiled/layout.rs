//! Where each piece of a circuit recorded in pieces sits in the whole
//! recording: the one rule that lays the pieces end to end
//! ([`crate::compiled::compile_split`]) and that the checked witness pass in
//! pieces ([`crate::compiled::assign_split`]) follows to compare a piece's
//! constraints with the rows they became.
//!
//! Piece 0 keeps its numbers. Every later piece repeats the preamble (its
//! first inputs, aux variables and constraints are piece 0's) and its own
//! share follows the pieces before it: its own variables are renumbered
//! after theirs and its own rows appended after theirs.

/// Inputs (ONE not counted), aux variables and constraints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inputs: usize,
    pub aux: usize,
    pub constraints: usize,
}

/// How a recording made in pieces was joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceLayout {
    /// What every piece after the first repeats before its own share.
    pub preamble: Counts,
    /// Per piece, what the pieces before it put in the whole recording
    /// (piece 0's: nothing).
    pub starts: Vec<Counts>,
    /// Per piece, what it records itself, preamble included.
    pub sizes: Vec<Counts>,
}

impl PieceLayout {
    /// The number of pieces.
    pub fn pieces(&self) -> usize {
        self.starts.len()
    }

    /// Piece `k`'s input `j` (ONE is 0) in the whole recording.
    pub fn input(&self, k: usize, j: usize) -> usize {
        if k == 0 || j <= self.preamble.inputs {
            j
        } else {
            // ONE, the inputs before this piece's own, then its own.
            1 + self.starts[k].inputs + j - 1 - self.preamble.inputs
        }
    }

    /// Piece `k`'s aux variable `i` in the whole recording.
    pub fn aux(&self, k: usize, i: usize) -> usize {
        if k == 0 || i < self.preamble.aux {
            i
        } else {
            self.starts[k].aux + i - self.preamble.aux
        }
    }

    /// Piece `k`'s constraint `row` in the whole recording.
    pub fn row(&self, k: usize, row: usize) -> usize {
        let pre = &self.preamble;
        if k == 0 || row < pre.constraints {
            row
        } else {
            self.starts[k].constraints + row - pre.constraints
        }
    }

    /// What piece `k` adds to the whole recording: all of piece 0, the
    /// others without the preamble.
    pub fn own(&self, k: usize) -> Counts {
        let size = self.sizes[k];
        if k == 0 {
            return size;
        }
        let pre = &self.preamble;
        Counts {
            inputs: size.inputs - pre.inputs,
            aux: size.aux - pre.aux,
            constraints: size.constraints - pre.constraints,
        }
    }

    /// The layout of pieces of `sizes` (each at least the preamble, which
    /// the join has checked).
    pub fn new(preamble: Counts, sizes: Vec<Counts>) -> Self {
        let mut layout = PieceLayout {
            preamble,
            starts: Vec::with_capacity(sizes.len()),
            sizes,
        };
        let mut at = Counts::default();
        for k in 0..layout.sizes.len() {
            layout.starts.push(at);
            let own = layout.own(k);
            at.inputs += own.inputs;
            at.aux += own.aux;
            at.constraints += own.constraints;
        }
        layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_pieces_keep_the_preamble_and_follow_the_pieces_before() {
        let pre = Counts {
            inputs: 1,
            aux: 2,
            constraints: 3,
        };
        let size = |own: usize| Counts {
            inputs: pre.inputs + own,
            aux: pre.aux + 2 * own,
            constraints: pre.constraints + 3 * own,
        };
        let layout = PieceLayout::new(pre, vec![size(2), size(1), size(4)]);
        assert_eq!(layout.pieces(), 3);
        // Piece 0 keeps every number.
        assert_eq!(layout.aux(0, 5), 5);
        assert_eq!(layout.input(0, 2), 2);
        assert_eq!(layout.row(0, 7), 7);
        // Piece 1: the preamble stays, its own follow piece 0's 3 inputs,
        // 6 aux variables and 9 constraints.
        assert_eq!(layout.aux(1, 1), 1);
        assert_eq!(layout.input(1, 1), 1);
        assert_eq!(layout.input(1, 0), 0);
        assert_eq!(layout.aux(1, 2), 6);
        assert_eq!(layout.input(1, 2), 4);
        assert_eq!(layout.row(1, 2), 2);
        assert_eq!(layout.row(1, 3), 9);
        // Piece 2 after piece 1's own 1 input, 2 aux and 3 constraints.
        assert_eq!(layout.aux(2, 2), 8);
        assert_eq!(layout.input(2, 2), 5);
        assert_eq!(layout.row(2, 3), 12);
        assert_eq!(
            layout.own(2),
            Counts {
                inputs: 4,
                aux: 8,
                constraints: 12
            }
        );
    }
}
