//! [`PinnedVec`]: a fixed-capacity typed vector over a [`PinnedBuf`], what
//! synthesis writes a, b, c and the assignments into.

use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ops::{Deref, DerefMut};

use super::buf::PinnedBuf;
use super::error::PoolError;
use super::pinned::PinnedPool;

/// Why a buffer cannot hold `T`s, or none could be checked out for them.
#[derive(Debug, thiserror::Error)]
pub enum PinnedVecError {
    #[error("buffer at {addr:#x} is not aligned to {align} bytes for {type_name}")]
    Misaligned {
        addr: usize,
        align: usize,
        type_name: &'static str,
    },
    #[error("{type_name} is zero-sized; a pinned vector of it makes no sense")]
    ZeroSized { type_name: &'static str },
    #[error("{capacity} elements of {type_name} overflow the address space")]
    TooLarge {
        capacity: usize,
        type_name: &'static str,
    },
    #[error("checking out a pinned vector: {0}")]
    Checkout(#[from] PoolError),
}

/// A push or resize past the fixed capacity; the vector never reallocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("pinned vector is full: {requested} elements requested, capacity {capacity}")]
pub struct CapacityError {
    pub requested: usize,
    pub capacity: usize,
}

/// A vector of `T` living in a pool buffer, with a capacity fixed at
/// creation (`buf.len() / size_of::<T>()`).
///
/// Soundness: the buffer is checked to be aligned for `T`; only the first
/// `len` elements are ever exposed, and each of them was written as a whole
/// `T` by `push`/`resize`/`extend_from_slice`, so reading never interprets
/// stale bytes (from a previous job, possibly of another type) as a `T`.
/// `T: Copy` means no element needs dropping.
pub struct PinnedVec<T: Copy> {
    buf: PinnedBuf,
    len: usize,
    capacity: usize,
    _elem: PhantomData<T>,
}

impl<T: Copy> PinnedVec<T> {
    /// An empty vector over `buf`.
    pub fn new(buf: PinnedBuf) -> Result<Self, PinnedVecError> {
        let type_name = std::any::type_name::<T>();
        if size_of::<T>() == 0 {
            return Err(PinnedVecError::ZeroSized { type_name });
        }
        let addr = buf.as_ptr() as usize;
        if !addr.is_multiple_of(align_of::<T>()) {
            return Err(PinnedVecError::Misaligned {
                addr,
                align: align_of::<T>(),
                type_name,
            });
        }
        let capacity = buf.len() / size_of::<T>();
        Ok(Self {
            buf,
            len: 0,
            capacity,
            _elem: PhantomData,
        })
    }

    /// Checks out a buffer for `capacity` elements and wraps it.
    pub fn with_capacity(
        pool: &PinnedPool,
        who: &str,
        capacity: usize,
    ) -> Result<Self, PinnedVecError> {
        let bytes =
            capacity
                .checked_mul(size_of::<T>())
                .ok_or_else(|| PinnedVecError::TooLarge {
                    capacity,
                    type_name: std::any::type_name::<T>(),
                })?;
        Self::new(pool.checkout(who, bytes)?)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn page_locked(&self) -> bool {
        self.buf.page_locked()
    }

    fn base(&self) -> *mut T {
        self.buf.as_ptr().cast::<T>().cast_mut()
    }

    pub fn push(&mut self, value: T) -> Result<(), CapacityError> {
        if self.len == self.capacity {
            return Err(CapacityError {
                requested: self.len + 1,
                capacity: self.capacity,
            });
        }
        // SAFETY: len < capacity, so the slot lies inside the buffer; the
        // pointer is aligned for T (checked in `new`).
        unsafe { self.base().add(self.len).write(value) };
        self.len += 1;
        Ok(())
    }

    pub fn extend_from_slice(&mut self, values: &[T]) -> Result<(), CapacityError> {
        let end = self
            .len
            .checked_add(values.len())
            .filter(|e| *e <= self.capacity);
        let Some(end) = end else {
            return Err(CapacityError {
                requested: self.len.saturating_add(values.len()),
                capacity: self.capacity,
            });
        };
        // SAFETY: `len..end` lies inside the buffer, which cannot overlap
        // `values` (we own it exclusively through `&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(values.as_ptr(), self.base().add(self.len), values.len())
        };
        self.len = end;
        Ok(())
    }

    /// Sets the length to `new_len`, writing `value` into new slots
    /// (e.g. zero-padding to the domain size); shrinking just forgets the tail.
    pub fn resize(&mut self, new_len: usize, value: T) -> Result<(), CapacityError> {
        if new_len > self.capacity {
            return Err(CapacityError {
                requested: new_len,
                capacity: self.capacity,
            });
        }
        for i in self.len..new_len {
            // SAFETY: i < new_len <= capacity; aligned as checked in `new`.
            unsafe { self.base().add(i).write(value) };
        }
        self.len = new_len;
        Ok(())
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements were written as `T`s; aligned,
        // inside the buffer.
        unsafe { std::slice::from_raw_parts(self.base(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }
    }

    /// The underlying buffer (its bytes keep whatever was written).
    pub fn into_buf(self) -> PinnedBuf {
        self.buf
    }
}

impl<T: Copy> Deref for PinnedVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy> DerefMut for PinnedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for PinnedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedVec")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("buf", &self.buf)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{BudgetError, MemoryBudget};
    use crate::pool::host::HeapAllocator;
    use crate::pool::pinned::PoolLimits;
    use std::error::Error as _;
    use std::sync::Arc;

    fn pool() -> PinnedPool {
        PinnedPool::new(
            Arc::new(HeapAllocator),
            MemoryBudget::new(1 << 20),
            PoolLimits::default(),
        )
    }

    #[test]
    fn push_until_full_then_refuses() {
        let p = pool();
        let mut v = PinnedVec::<u64>::new(p.checkout("t", 24).unwrap()).unwrap();
        assert_eq!(v.capacity(), 3);
        for i in 0..3 {
            v.push(i).unwrap();
        }
        assert_eq!(
            v.push(9),
            Err(CapacityError {
                requested: 4,
                capacity: 3
            })
        );
        assert_eq!(v.as_slice(), &[0, 1, 2]);
    }

    #[test]
    fn resize_pads_and_truncates_within_capacity() {
        let p = pool();
        let mut v = PinnedVec::<u32>::with_capacity(&p, "t", 8).unwrap();
        v.extend_from_slice(&[7, 8]).unwrap();
        v.resize(5, 0).unwrap();
        assert_eq!(&v[..], &[7, 8, 0, 0, 0]);
        v.resize(1, 0).unwrap();
        assert_eq!(&v[..], &[7]);
        assert!(v.resize(9, 0).is_err());
        assert!(v.extend_from_slice(&[1; 8]).is_err());
        v.as_mut_slice()[0] = 3;
        assert_eq!(v[0], 3);
        v.clear();
        assert!(v.is_empty());
    }

    #[test]
    fn reused_buffer_exposes_no_stale_elements() {
        let p = pool();
        let mut v = PinnedVec::<u64>::with_capacity(&p, "first", 16).unwrap();
        v.resize(16, u64::MAX).unwrap();
        drop(v);
        let v = PinnedVec::<u64>::with_capacity(&p, "second", 16).unwrap();
        assert_eq!(
            p.stats().hits,
            1,
            "the second vector reuses the first region"
        );
        assert!(v.as_slice().is_empty());
    }

    #[test]
    fn zero_sized_types_are_refused() {
        let p = pool();
        let err = PinnedVec::<()>::new(p.checkout("t", 8).unwrap()).unwrap_err();
        assert!(matches!(err, PinnedVecError::ZeroSized { .. }));
    }

    #[test]
    fn into_buf_keeps_the_written_bytes() {
        let p = pool();
        let mut v = PinnedVec::<u8>::with_capacity(&p, "t", 4).unwrap();
        v.extend_from_slice(&[1, 2, 3, 4]).unwrap();
        let buf = v.into_buf();
        assert_eq!(&buf[..4], &[1, 2, 3, 4]);
    }

    #[test]
    fn a_capacity_that_overflows_is_refused_before_any_checkout() {
        let p = pool();
        let err = PinnedVec::<u64>::with_capacity(&p, "t", usize::MAX / 4).unwrap_err();
        assert!(
            matches!(err, PinnedVecError::TooLarge { capacity, .. } if capacity == usize::MAX / 4)
        );
        assert_eq!(p.stats().grows, 0);
    }

    #[test]
    fn a_refused_checkout_is_the_source_of_the_vector_error() {
        let p = pool();
        let err = PinnedVec::<u64>::with_capacity(&p, "t", 1 << 20).unwrap_err();
        let source = err.source().and_then(|s| s.downcast_ref::<PoolError>());
        assert!(
            matches!(
                source,
                Some(PoolError::Budget(BudgetError::ExceedsBudget { .. }))
            ),
            "{err:?}"
        );
    }
}
