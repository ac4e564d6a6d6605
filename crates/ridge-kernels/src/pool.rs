//! A persistent, low-latency thread pool for the kernels.
//!
//! A decode step issues a few hundred short parallel loops (one per matrix product), each only
//! tens of microseconds long, so the cost of handing out work matters as much as the work. The
//! pool keeps `threads − 1` workers alive for the life of the process; the calling thread takes
//! part in every loop. The tasks `0..n` are cut into one contiguous range per thread; each
//! participant claims tasks from its own range in order, then from the others' (dynamic
//! balance, no queues, no allocation). Contiguous ranges matter for the matrix products: a
//! task is a chunk of weight rows, so each thread streams one run of consecutive memory that
//! the hardware prefetchers follow, instead of every other chunk (measured: a 576×576 Q4_1
//! decode product 14.9 µs instead of 18.4 µs on two threads). Between loops, workers spin for
//! a short while (the next loop usually comes within microseconds), then park on a condition
//! variable so an idle ridge uses no CPU.
//!
//! Only one loop runs at a time: a second thread calling [`parallel_for`] while the pool is busy
//! runs its loop on its own thread instead of waiting (results are identical either way, since
//! every task's output is independent of which thread runs it).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(2000);

/// `state` layout: participants in bits 0..16, the "closed" flag in bit 16, the loop's epoch
/// above. Keeping them in one word lets a worker join a loop only while it is still open, so
/// the submitter never waits for a worker that has not started (a descheduled worker on a
/// busy machine would otherwise stall every loop for a whole time slice).
const CLOSED: u64 = 1 << 16;
const EPOCH_SHIFT: u32 = 17;
const PARTICIPANTS: u64 = CLOSED - 1;

type TaskFn = dyn Fn(usize) + Sync;

/// A claim counter on its own cache line (the participants' counters are written
/// concurrently).
#[repr(align(64))]
struct Counter(AtomicUsize);

struct Shared {
    /// Epoch, closed flag and participant count of the current loop (see `CLOSED`).
    state: AtomicU64,
    /// Per participant (by id), the next task index to claim in its range.
    next: Box<[Counter]>,
    /// Tasks in the current loop.
    n_tasks: AtomicUsize,
    /// Workers parked (or about to park) on `cv`.
    sleepers: AtomicUsize,
    /// A task panicked in the current loop.
    panicked: AtomicBool,
    /// The current loop body. Written only by the submitter while no worker participates.
    func: UnsafeCell<Option<*const TaskFn>>,
    lock: Mutex<()>,
    cv: Condvar,
    /// Held by the thread whose loop is running.
    submit: Mutex<()>,
}

// SAFETY: `func` is written only by the thread holding `submit`, before the new epoch is
// published (SeqCst) and while no worker participates. A worker dereferences it only after
// joining the loop (a CAS that succeeds only while the loop is open), and the submitter closes
// the loop and waits for the participant count to reach 0 before it returns, so the closure
// outlives every use. The pointee is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

struct Pool {
    shared: &'static Shared,
    threads: usize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

fn start(threads: usize) -> Pool {
    let threads = threads.max(1);
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        state: AtomicU64::new(CLOSED),
        next: (0..threads).map(|_| Counter(AtomicUsize::new(0))).collect(),
        n_tasks: AtomicUsize::new(0),
        sleepers: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        func: UnsafeCell::new(None),
        lock: Mutex::new(()),
        cv: Condvar::new(),
        submit: Mutex::new(()),
    }));
    let mut started = 1;
    for i in 1..threads {
        let spawned = std::thread::Builder::new()
            .name(format!("ridge-worker-{i}"))
            .spawn(move || worker(shared));
        if spawned.is_ok() {
            started += 1;
        }
    }
    Pool {
        shared,
        threads: started,
    }
}

/// The end of range `r` of `ranges` over `n` tasks (range `r` starts where `r − 1` ends).
fn range_end(n: usize, ranges: usize, r: usize) -> usize {
    n * (r + 1) / ranges
}

/// Runs tasks as participant `id`: its own range first, then whatever is left of the others'.
fn run_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync + '_), id: usize) {
    let n = s.n_tasks.load(SeqCst);
    let ranges = s.next.len();
    for k in 0..ranges {
        let r = (id + k) % ranges;
        let end = range_end(n, ranges, r);
        loop {
            let i = s.next[r].0.fetch_add(1, SeqCst);
            if i >= end {
                break;
            }
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                s.panicked.store(true, SeqCst);
            }
        }
    }
}

/// Tries to join the open loop of epoch `epoch`; on success, the participant id it got
/// (1 for the first worker to join: the submitter is 0).
fn join(s: &Shared, epoch: u64) -> Option<usize> {
    let mut cur = s.state.load(SeqCst);
    loop {
        if cur >> EPOCH_SHIFT != epoch || cur & CLOSED != 0 {
            return None;
        }
        match s.state.compare_exchange_weak(cur, cur + 1, SeqCst, SeqCst) {
            Ok(_) => return Some((cur & PARTICIPANTS) as usize + 1),
            Err(now) => cur = now,
        }
    }
}

fn worker(s: &'static Shared) {
    let mut seen = s.state.load(SeqCst) >> EPOCH_SHIFT;
    loop {
        // Spin, then park, until a new loop is published.
        let t0 = Instant::now();
        let mut spins = 0u32;
        while s.state.load(SeqCst) >> EPOCH_SHIFT == seen {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && t0.elapsed() > SPIN {
                let guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, SeqCst);
                let guard =
                    s.cv.wait_while(guard, |_| s.state.load(SeqCst) >> EPOCH_SHIFT == seen)
                        .unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_sub(1, SeqCst);
                drop(guard);
            }
        }
        seen = s.state.load(SeqCst) >> EPOCH_SHIFT;
        if let Some(id) = join(s, seen) {
            // SAFETY: joined while open, so the submitter waits for us (see `impl Sync`).
            if let Some(f) = unsafe { *s.func.get() } {
                // SAFETY: as above.
                run_tasks(s, unsafe { &*f }, id);
            }
            s.state.fetch_sub(1, SeqCst);
        }
    }
}

/// The environment variable that sets the default thread count (`--threads` still wins): CI
/// runs the batch-invariance tests under other counts than this machine's cores, so the
/// partitions a many-core CPU takes (attention by chunks, other row splits) are checked here.
pub const THREADS_ENV: &str = "RIDGE_THREADS";

/// The most threads [`THREADS_ENV`] may ask for.
const MAX_THREADS: usize = 256;

fn pool() -> &'static Pool {
    POOL.get_or_init(|| start(default_threads()))
}

/// The default thread count: physical cores. Decode is memory-bound and the kernels keep the
/// SIMD units busy, so a second hyper-thread per core adds contention, not throughput. On Linux
/// the physical cores are the distinct (package, core) pairs among the CPUs this process may
/// run on; elsewhere, or if that cannot be read, all available CPUs. [`THREADS_ENV`], when set
/// to a count of at least 1, replaces that count.
pub fn default_threads() -> usize {
    if let Some(n) = std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
    {
        return n.min(MAX_THREADS);
    }
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    physical_cores().map_or(available, |p| p.clamp(1, available))
}

fn physical_cores() -> Option<usize> {
    let entries = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    let mut cores = std::collections::HashSet::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(id) = name.strip_prefix("cpu") else {
            continue;
        };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if std::fs::read_to_string(e.path().join("online")).is_ok_and(|s| s.trim() == "0") {
            continue;
        }
        let topo = e.path().join("topology");
        let read = |f: &str| std::fs::read_to_string(topo.join(f)).ok();
        cores.insert((read("physical_package_id")?, read("core_id")?));
    }
    (!cores.is_empty()).then_some(cores.len())
}

/// Sets the number of threads (once, before first use; later calls are ignored). Returns the
/// count in use.
pub fn init(threads: usize) -> usize {
    POOL.get_or_init(|| start(threads)).threads
}

/// Threads taking part in each parallel loop (workers plus the caller).
pub fn threads() -> usize {
    pool().threads
}

/// Runs `f(i)` for every `i` in `0..n` across the pool; returns when all are done. A panic in
/// any task is re-raised here after the loop has finished.
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    let p = pool();
    if n <= 1 || p.threads == 1 {
        (0..n).for_each(f);
        return;
    }
    let s = p.shared;
    let Ok(_guard) = s.submit.try_lock() else {
        // Another thread's loop is running: do this one here, serially.
        (0..n).for_each(f);
        return;
    };
    let fref: &(dyn Fn(usize) + Sync) = &f;
    // SAFETY: lifetime erasure only; this function does not return before every participant
    // has finished with the pointer (participants back to 0 below).
    let fptr: *const TaskFn =
        unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static TaskFn>(fref) };
    // SAFETY: we hold `submit` and the previous loop is closed with no participants, so no
    // worker reads `func` now.
    unsafe { *s.func.get() = Some(fptr) };
    s.panicked.store(false, SeqCst);
    let ranges = s.next.len();
    for (r, c) in s.next.iter().enumerate() {
        c.0.store(
            if r == 0 {
                0
            } else {
                range_end(n, ranges, r - 1)
            },
            SeqCst,
        );
    }
    s.n_tasks.store(n, SeqCst);
    let epoch = (s.state.load(SeqCst) >> EPOCH_SHIFT) + 1;
    s.state.store(epoch << EPOCH_SHIFT, SeqCst);
    if s.sleepers.load(SeqCst) > 0 {
        let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.cv.notify_all();
    }
    run_tasks(s, fref, 0);
    s.state.fetch_or(CLOSED, SeqCst);
    let mut spins = 0u32;
    while s.state.load(SeqCst) & PARTICIPANTS != 0 {
        spins = spins.wrapping_add(1);
        if spins < 4096 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    // SAFETY: the loop is closed and has no participants.
    unsafe { *s.func.get() = None };
    if s.panicked.load(SeqCst) {
        panic!("a parallel task panicked");
    }
}

/// Runs `f(lo, hi)` over consecutive pieces of `0..len` whose bounds are multiples of `unit`
/// (the last piece ends at `len`): across the pool when `len >= min_len`, else once over the
/// whole range on this thread. For element-wise work a prefill does between products (the
/// activations' quantization, gated activations): serial, it leaves the other threads idle
/// for ~5% of a 512-token prefill.
pub(crate) fn for_ranges(len: usize, unit: usize, min_len: usize, f: impl Fn(usize, usize) + Sync) {
    let p = pool();
    if len < min_len || p.threads == 1 {
        return f(0, len);
    }
    // A few pieces per thread, so one slowed thread's share is taken by the others.
    let pieces = 4 * p.threads;
    let piece = len.div_ceil(pieces).next_multiple_of(unit.max(1));
    parallel_for(len.div_ceil(piece), |i| {
        f(i * piece, ((i + 1) * piece).min(len))
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_is_between_one_and_the_available_cpus() {
        let n = default_threads();
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=available).contains(&n), "{n} of {available}");
    }

    #[test]
    fn every_index_runs_exactly_once_across_many_loops() {
        for n in [0usize, 1, 2, 3, 17, 1000] {
            for _ in 0..50 {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                parallel_for(n, |i| {
                    hits[i].fetch_add(1, SeqCst);
                });
                assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
            }
        }
    }

    #[test]
    fn concurrent_callers_and_parked_workers_still_complete() {
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for k in 0..200 {
                        let sum = AtomicUsize::new(0);
                        parallel_for(64, |i| {
                            sum.fetch_add(i, SeqCst);
                        });
                        assert_eq!(sum.load(SeqCst), 64 * 63 / 2);
                        if k % 50 == 0 {
                            std::thread::sleep(SPIN * 2); // let workers park
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_pool_survives() {
        let r = catch_unwind(|| parallel_for(8, |i| assert!(i != 5, "boom")));
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        parallel_for(8, |i| {
            sum.fetch_add(i, SeqCst);
        });
        assert_eq!(sum.load(SeqCst), 28);
    }
}
