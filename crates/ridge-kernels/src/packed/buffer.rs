//! The memory a packed matrix owns: for large matrices an anonymous mapping that asks the
//! kernel for transparent huge pages, for small ones the allocator's memory.
//!
//! Why huge pages: a decode step streams every weight once, a gigabyte or more spread over
//! hundreds of thousands of 4 KiB pages, so each page costs a TLB miss and a page walk that
//! the products' prefetches stall on; a mixture of experts jumps between experts' row ranges
//! all over its stacked tensors and pays the most. With 2 MiB pages the same bytes need 512×
//! fewer translations. Linux grants them to a mapping marked `MADV_HUGEPAGE` (the default
//! `madvise` policy of most distributions) as its pages are first written, which is why the
//! mapping is marked before the packer writes it; where the kernel refuses, the mapping
//! simply stays in small pages. An anonymous mapping is also zero-filled lazily, so the load
//! no longer writes every byte twice.

use memmap2::MmapMut;

/// Matrices below this size stay in the allocator's memory (a huge page would be mostly
/// padding).
const MAP_BYTES: usize = 2 << 20;

/// 32 bytes, 32-byte aligned: the unit of a packed buffer (tiles start on vector boundaries).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Chunk([u8; 32]);

/// `len` zeroed bytes, 32-byte aligned.
pub(crate) enum TileBuf {
    /// A page-aligned anonymous mapping of at least `len` bytes, marked for huge pages.
    Map(MmapMut, usize),
    /// Allocated chunks (a small matrix, or the mapping failed).
    Vec(Vec<Chunk>, usize),
}

impl TileBuf {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> TileBuf {
        if len >= MAP_BYTES {
            if let Ok(map) = MmapMut::map_anon(len) {
                #[cfg(target_os = "linux")]
                // A hint: where refused, the pages are small ones and nothing else changes.
                let _ = map.advise(memmap2::Advice::HugePage);
                return TileBuf::Map(map, len);
            }
        }
        TileBuf::Vec(vec![Chunk([0; 32]); len.div_ceil(32)], len)
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            TileBuf::Map(m, len) => &m[..*len],
            // SAFETY: the vector holds `len.div_ceil(32)` initialised chunks of plain bytes,
            // at least `len` bytes, borrowed for `self`'s lifetime.
            TileBuf::Vec(v, len) => unsafe {
                std::slice::from_raw_parts(v.as_ptr() as *const u8, *len)
            },
        }
    }

    /// The bytes, writable.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            TileBuf::Map(m, len) => &mut m[..*len],
            // SAFETY: as in `bytes`; `&mut self` makes the slice the only access.
            TileBuf::Vec(v, len) => unsafe {
                std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, *len)
            },
        }
    }

    /// Whether the bytes are a mapping marked for huge pages.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, TileBuf::Map(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_sized_on_both_paths() {
        for len in [0, 1, 33, 4096, MAP_BYTES - 1, MAP_BYTES, MAP_BYTES + 4097] {
            let mut b = TileBuf::zeroed(len);
            assert_eq!(b.is_mapped(), len >= MAP_BYTES, "{len}");
            assert_eq!(b.bytes().len(), len);
            assert!(b.bytes().iter().all(|&x| x == 0), "{len}");
            assert_eq!(b.bytes().as_ptr() as usize % 32, 0, "{len}");
            if len > 0 {
                b.bytes_mut()[len - 1] = 7;
                assert_eq!(b.bytes()[len - 1], 7);
            }
        }
    }
}
