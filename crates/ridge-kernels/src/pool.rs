//! Parallel loops. Everything parallel in ridge goes through [`parallel_for`], so the
//! implementation (today rayon's global pool, sized once by [`init`]) can be replaced by a
//! lower-latency spinning pool without touching callers.

use std::sync::OnceLock;

static THREADS: OnceLock<usize> = OnceLock::new();

/// Sets the number of worker threads (once; later calls are ignored). Returns the count in use.
pub fn init(threads: usize) -> usize {
    let n = *THREADS.get_or_init(|| {
        let n = threads.max(1);
        // Building the global pool fails only if it was already built; then it keeps its size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
        n
    });
    n
}

/// Worker threads in use (initialising with the number of available cores if needed).
pub fn threads() -> usize {
    *THREADS.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
        n
    })
}

/// Runs `f(i)` for every `i` in `0..n`, spread over the worker threads; returns when all are done.
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    if n <= 1 || threads() == 1 {
        (0..n).for_each(f);
        return;
    }
    use rayon::prelude::*;
    (0..n).into_par_iter().for_each(&f);
}

/// A raw pointer that tasks of one [`parallel_for`] share to write disjoint elements of one
/// output buffer. Whoever creates it guarantees the buffer outlives the loop and that no two
/// tasks write the same element.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(pub *mut T);
// SAFETY: used only to write disjoint elements from parallel tasks, see the type's docs.
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper, not the field).
    #[inline]
    pub fn ptr(&self) -> *mut T {
        self.0
    }
}
