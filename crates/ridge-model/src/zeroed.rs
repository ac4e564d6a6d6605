//! Zero-initialised buffers whose pages cost memory only once written: the KV cache's storage.
//!
//! Why not `vec![0; n]`: the allocator hands out zeroed memory lazily only when it maps a fresh
//! region for it. After a model load has freed large buffers, glibc serves even multi-megabyte
//! requests from its heap and zeroes them with `memset`, touching every page — a cache sized
//! for a long context then costs its whole size in resident memory from the first token,
//! whatever the sequences hold, and blocks that the windowed layers give back save nothing.
//! An anonymous mapping is zero-filled by the kernel page by page on first write, every time.

use memmap2::MmapMut;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Element types whose all-zero bit pattern is a valid value (zero).
pub(crate) trait ZeroValid: Copy {}
impl ZeroValid for u8 {}
impl ZeroValid for half::f16 {}

/// `len` zeroed elements of `T`.
pub(crate) enum Zeroed<T: ZeroValid> {
    /// An anonymous mapping (page-aligned, at least `len · size_of::<T>()` bytes).
    Map(MmapMut, usize, PhantomData<T>),
    /// The allocator's memory, if the mapping failed (or `len` is 0).
    Vec(Vec<T>),
}

impl<T: ZeroValid> Zeroed<T> {
    /// `len` zeroes; mapped lazily where the system allows, else allocated.
    pub(crate) fn new(len: usize) -> Self {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        match (bytes > 0).then(|| MmapMut::map_anon(bytes)) {
            Some(Ok(map)) => Zeroed::Map(map, len, PhantomData),
            // SAFETY: ZeroValid types are valid for the all-zero bit pattern.
            _ => Zeroed::Vec(vec![unsafe { std::mem::zeroed::<T>() }; len]),
        }
    }
}

impl<T: ZeroValid> Deref for Zeroed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            // SAFETY: the mapping is page-aligned (so aligned for T), at least `len ·
            // size_of::<T>()` bytes long, zero-initialised by the kernel (a valid T by the
            // ZeroValid contract) or written only through `deref_mut` as T values, and lives
            // as long as `self`.
            Zeroed::Map(m, len, _) => unsafe {
                std::slice::from_raw_parts(m.as_ptr() as *const T, *len)
            },
            Zeroed::Vec(v) => v,
        }
    }
}

impl<T: ZeroValid> DerefMut for Zeroed<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            // SAFETY: as in `deref`; `&mut self` makes the slice the only access.
            Zeroed::Map(m, len, _) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr() as *mut T, *len)
            },
            Zeroed::Vec(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_zero_and_keep_what_is_written() {
        for len in [0usize, 1, 4097, 1 << 20] {
            let mut z = Zeroed::<half::f16>::new(len);
            assert_eq!(z.len(), len);
            assert!(z.iter().all(|v| v.to_bits() == 0));
            if len > 0 {
                z[len - 1] = half::f16::from_f32(1.5);
                assert_eq!(z[len - 1].to_f32(), 1.5);
            }
            let b = Zeroed::<u8>::new(len);
            assert!(b.iter().all(|&v| v == 0));
        }
    }
}
