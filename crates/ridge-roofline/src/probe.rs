//! Probes of this machine's roofs: memory read bandwidth and arithmetic rate.
//!
//! Every probe reports the *best* of several passes: interference (other processes, frequency
//! ramps, page faults) only ever makes a pass slower, so the fastest pass is the closest
//! estimate of what the hardware can do. Each pass is timed from the earliest thread start to the
//! latest thread end, so the figure is what all threads achieve together.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use ridge_kernels::{blocks, matmul, ActPrecision, DType, Isa, MatmulScratch, WeightMatrix};

mod peak;
pub use peak::{amx_bf16_gflops, bf16_gflops, int8_peak, Int8Peak, PEAK_ITERS};

/// One cache line of the bandwidth buffer; the alignment makes every 32-byte half an aligned
/// AVX2 load.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u64; 8]);

/// What [`run`] measures and how hard it tries.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Threads reading / computing at once.
    pub threads: usize,
    /// Size of the bandwidth buffer in bytes; must dwarf the last-level cache.
    pub buffer_bytes: usize,
    /// Timed passes over the buffer (the best counts).
    pub passes: usize,
    /// Also measure peak FMA and the quantized matmul kernel.
    pub compute: bool,
}

impl ProbeConfig {
    /// The full probe: a 1 GiB buffer (≥ 30× a typical 32 MiB L3; at least
    /// [`DRAM_BUFFER_LLC_MULTIPLE`]× the last-level cache on machines with a larger one), 10
    /// passes, compute probes included. Takes a few seconds, most of it first-touching the buffer.
    pub fn full(threads: usize) -> Self {
        ProbeConfig {
            threads,
            buffer_bytes: dram_buffer_bytes(1 << 30),
            passes: 10,
            compute: true,
        }
    }

    /// A bandwidth-only probe of about a second for `ridge bench`: 256 MiB (8× a 32 MiB L3;
    /// at least [`DRAM_BUFFER_LLC_MULTIPLE`]× the last-level cache, so a 300 MB L3 does not
    /// serve the "DRAM" figure from cache), 8 passes.
    pub fn quick(threads: usize) -> Self {
        ProbeConfig {
            threads,
            buffer_bytes: dram_buffer_bytes(256 << 20),
            passes: 8,
            compute: false,
        }
    }
}

/// How many times the last-level cache a DRAM bandwidth buffer spans at least: after one pass
/// the cache holds at most a quarter of the buffer, so the best pass reads ≥ 75% from DRAM.
pub const DRAM_BUFFER_LLC_MULTIPLE: usize = 4;

/// `base` bytes, raised to [`DRAM_BUFFER_LLC_MULTIPLE`]× the last-level cache ([`llc_bytes`])
/// where that is larger, up to 4 GiB (a first touch of more would cost seconds and memory a
/// 2-core VM may not have; no CPU's L3 is near 1 GiB).
pub fn dram_buffer_bytes(base: usize) -> usize {
    let want = llc_bytes().map_or(0, |c| c.saturating_mul(DRAM_BUFFER_LLC_MULTIPLE));
    base.max(want.min(4 << 30))
}

/// The figures one [`run`] measured.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// Threads used.
    pub threads: usize,
    /// Bandwidth buffer size in bytes.
    pub buffer_bytes: usize,
    /// Timed passes over the buffer.
    pub passes: usize,
    /// Memory read bandwidth, GB/s (10⁹ bytes per second).
    pub read_bandwidth_gbs: f64,
    /// Peak f32 multiply-add rate over all threads, GFLOP/s; `None` if not measured.
    pub fma_gflops: Option<f64>,
    /// ridge's Q4_1 × int8 matmul on cache-resident data ([`MatmulShape::default`]), GFLOP/s;
    /// `None` if not measured.
    pub q4_1_matmul_gflops: Option<f64>,
    /// Peak int8 multiply-accumulate rate of the path ridge's kernels take ([`int8_peak`]):
    /// the compute roof of quantized prefill and batched decode. `None` if not measured or on
    /// the scalar path.
    pub int8: Option<Int8Peak>,
    /// Peak bf16 dot-product rate, GFLOP/s, where the CPU has AVX-512 BF16 ([`bf16_gflops`]).
    pub bf16_gflops: Option<f64>,
    /// Where the int8 roof is the AMX tile unit's: the AVX-512 VNNI path's peak beside it
    /// (what the vector kernels, and every step of fewer than 16 tokens, run at).
    pub int8_vector: Option<Int8Peak>,
    /// Peak bf16 rate of the AMX tile unit, GFLOP/s ([`amx_bf16_gflops`]); no kernel uses it.
    pub amx_bf16_gflops: Option<f64>,
    /// Name of the kernel path ([`Isa::name`]).
    pub isa: &'static str,
    /// Instruction set of the bandwidth and FMA probes: `"avx2"` or `"portable"`.
    pub probe_simd: &'static str,
    /// The last-level cache and the read bandwidth of data resident in it (`None` where its
    /// size is unknown).
    pub llc: Option<CacheProbe>,
}

/// The last-level cache as the probe saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheProbe {
    /// Size in bytes (as the OS reports it for the first CPU).
    pub bytes: usize,
    /// Read bandwidth of a buffer half its size, GB/s (all threads, best pass).
    pub read_bandwidth_gbs: f64,
}

/// Share of the last-level cache a step's working set may fill and still be read from it:
/// the rest holds activations, the KV being written, code and other processes' lines.
pub const LLC_FIT: f64 = 0.75;

/// Where one step's `working_set_bytes` (weights + K/V read) is read from: the last-level cache
/// when it fits in [`LLC_FIT`] of it, else DRAM. Returns the level's name and its bandwidth
/// (GB/s) — the bandwidth the step's floor must use, or a model that lives in a 300 MB L3 reads
/// as "111% of roofline" against DRAM.
pub fn memory_level(
    working_set_bytes: f64,
    dram_gbs: f64,
    llc: Option<CacheProbe>,
) -> (&'static str, f64) {
    match llc {
        Some(c) if working_set_bytes <= c.bytes as f64 * LLC_FIT => ("LLC", c.read_bandwidth_gbs),
        _ => ("DRAM", dram_gbs),
    }
}

/// The bandwidth a floor divides by, with the figures it was chosen from, so a report can show
/// DRAM's and the cache's side by side and say which one applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloorBandwidth {
    /// `"DRAM"`, `"LLC"`, or `"given"` (the user named the bandwidth).
    pub level: &'static str,
    /// The bandwidth of `level`, GB/s: what the floor uses.
    pub gbs: f64,
    /// DRAM read bandwidth as probed, GB/s (`None` when given).
    pub dram_gbs: Option<f64>,
    /// The last-level cache as probed (`None` when given or unknown).
    pub llc: Option<CacheProbe>,
}

impl FloorBandwidth {
    /// `given` GB/s when the user named one; else the quick probe on `threads` threads and the
    /// level a working set of `working_set_bytes` is read from ([`memory_level`]).
    pub fn choose(working_set_bytes: f64, given: Option<f64>, threads: usize) -> FloorBandwidth {
        match given {
            Some(gbs) => FloorBandwidth {
                level: "given",
                gbs,
                dram_gbs: None,
                llc: None,
            },
            None => Self::probe(working_set_bytes, threads),
        }
    }

    /// The quick probe as the compute roofs are probed: the best of [`FLOOR_BURSTS`] bursts
    /// [`FLOOR_BURST_PAUSE`] apart (a burst that other processes slowed does not set the floor),
    /// and the level a working set of `working_set_bytes` is read from.
    pub fn probe(working_set_bytes: f64, threads: usize) -> FloorBandwidth {
        let mut dram = 0.0f64;
        let mut llc: Option<CacheProbe> = None;
        for burst in 0..FLOOR_BURSTS {
            if burst > 0 {
                std::thread::sleep(FLOOR_BURST_PAUSE);
            }
            let p = run(&ProbeConfig::quick(threads));
            dram = dram.max(p.read_bandwidth_gbs);
            llc = best_cache(llc, p.llc);
        }
        Self::from_probe(working_set_bytes, dram, llc)
    }

    /// The floor from probed figures: the level `working_set_bytes` is read from and its
    /// bandwidth.
    pub fn from_probe(working_set_bytes: f64, dram_gbs: f64, llc: Option<CacheProbe>) -> Self {
        let (level, gbs) = memory_level(working_set_bytes, dram_gbs, llc);
        FloorBandwidth {
            level,
            gbs,
            dram_gbs: Some(dram_gbs),
            llc,
        }
    }

    /// Probes again ([`FloorBandwidth::probe`]) and keeps the faster reading of each level: a
    /// bandwidth is a property of the machine, so a slower reading is interference, never
    /// the truth. A given bandwidth is the user's and is returned unchanged.
    pub fn remeasured(&self, working_set_bytes: f64, threads: usize) -> FloorBandwidth {
        let Some(dram) = self.dram_gbs else {
            return *self;
        };
        let p = Self::probe(working_set_bytes, threads);
        Self::from_probe(
            working_set_bytes,
            dram.max(p.dram_gbs.unwrap_or(0.0)),
            best_cache(self.llc, p.llc),
        )
    }
}

/// Bursts of the floor's bandwidth probe ([`FloorBandwidth::probe`]); the best counts.
pub const FLOOR_BURSTS: usize = 3;

/// Pause between two bursts of the floor's bandwidth probe: long enough for a scheduler tick
/// of another process to pass, short enough to keep start-up under a second or two.
pub const FLOOR_BURST_PAUSE: Duration = Duration::from_millis(150);

/// The faster of two cache probes of the same cache.
fn best_cache(a: Option<CacheProbe>, b: Option<CacheProbe>) -> Option<CacheProbe> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.read_bandwidth_gbs > a.read_bandwidth_gbs {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    }
}

/// Parses a sysfs cache size (`"32768K"`, `"1M"`, `"512"`) into bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// The environment variable that overrides the last-level cache size the OS reports: a size
/// as sysfs writes it (`300M`, `32768K`, bytes), or `0` / `none` for "no cache known" (every
/// floor then reads from DRAM). Tests and CI set it to run the large-cache and the
/// small-cache paths on any machine; users can set it where the OS misreports a VM's cache.
pub const LLC_BYTES_ENV: &str = "RIDGE_LLC_BYTES";

/// Size of the last-level cache: [`LLC_BYTES_ENV`] when set (an unparsable value is ignored
/// with a warning on stderr), else the highest-level data or unified cache of CPU 0 from
/// Linux's sysfs.
pub fn llc_bytes() -> Option<usize> {
    match std::env::var(LLC_BYTES_ENV) {
        Ok(v) if !v.trim().is_empty() => match llc_override(&v) {
            Some(forced) => forced,
            None => {
                eprintln!("warning: {LLC_BYTES_ENV}={v:?} is not a cache size (e.g. 300M, 0); using the OS's");
                sysfs_llc_bytes()
            }
        },
        _ => sysfs_llc_bytes(),
    }
}

/// Parses an [`LLC_BYTES_ENV`] value: `Some(None)` for "no cache", `Some(Some(bytes))` for a
/// size, `None` when it is neither.
fn llc_override(v: &str) -> Option<Option<usize>> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("none") {
        return Some(None);
    }
    match parse_cache_size(v)? {
        0 => Some(None),
        n => Some(Some(n)),
    }
}

/// Size of the highest-level data or unified cache of CPU 0, from Linux's sysfs.
fn sysfs_llc_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
            let kind = read("type")?;
            if kind.trim() == "Instruction" {
                return None;
            }
            let level: u32 = read("level")?.trim().parse().ok()?;
            Some((level, parse_cache_size(&read("size")?)?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// The last-level cache's read bandwidth: a buffer of half its size, shared by the threads,
/// read many times (it stays resident after the first pass; the best pass counts). Passes
/// shrink with the buffer's size (40 for 16 MiB or less, at least 4) so a large or forced
/// cache size does not stretch the probe.
pub fn cache_probe(threads: usize) -> Option<CacheProbe> {
    let bytes = llc_bytes()?;
    let half = (bytes / 2).max(64);
    let passes = (40 * (16usize << 20) / half).clamp(4, 40);
    Some(CacheProbe {
        bytes,
        read_bandwidth_gbs: read_bandwidth(threads, half, passes),
    })
}

/// Runs the probes `cfg` asks for.
pub fn run(cfg: &ProbeConfig) -> ProbeReport {
    let read_bandwidth_gbs = read_bandwidth(cfg.threads, cfg.buffer_bytes, cfg.passes);
    let (fma, mm, int8, bf16) = if cfg.compute {
        (
            Some(fma_gflops(cfg.threads, FMA_ITERS, 5)),
            Some(q4_1_matmul_gflops(MatmulShape::default(), 5)),
            int8_peak(Isa::detect(), cfg.threads, PEAK_ITERS, 5),
            bf16_gflops(cfg.threads, PEAK_ITERS, 5),
        )
    } else {
        (None, None, None, None)
    };
    let (int8_vector, amx_bf16) = match (cfg.compute, Isa::detect().amx()) {
        (true, true) => (
            Isa::of(ridge_kernels::IsaKind::Avx512)
                .and_then(|v| int8_peak(v, cfg.threads, PEAK_ITERS, 5)),
            amx_bf16_gflops(cfg.threads, PEAK_ITERS, 5),
        ),
        _ => (None, None),
    };
    ProbeReport {
        threads: cfg.threads.max(1),
        buffer_bytes: cfg.buffer_bytes,
        passes: cfg.passes.max(1),
        read_bandwidth_gbs,
        fma_gflops: fma,
        q4_1_matmul_gflops: mm,
        int8,
        bf16_gflops: bf16,
        int8_vector,
        amx_bf16_gflops: amx_bf16,
        isa: Isa::detect().name(),
        probe_simd: if has_avx2() { "avx2" } else { "portable" },
        llc: cache_probe(cfg.threads),
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs a pass of work on each of `threads` scoped threads for `passes` passes, all threads
/// released together by a barrier each pass, and returns the best pass's wall time (earliest
/// start to latest end). `setup(thread_index)` runs once per thread before the first pass and
/// builds that thread's pass closure.
fn timed_passes<'a, S>(threads: usize, passes: usize, setup: S) -> Duration
where
    S: Fn(usize) -> Box<dyn FnMut() + 'a> + Sync,
{
    let barrier = Barrier::new(threads);
    let spans: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let setup = &setup;
                s.spawn(move || {
                    let mut f = setup(t);
                    let mut spans = Vec::with_capacity(passes);
                    for _ in 0..passes {
                        barrier.wait();
                        let t0 = Instant::now();
                        f();
                        spans.push((t0, Instant::now()));
                    }
                    spans
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    (0..passes)
        .filter_map(|p| {
            let start = spans.iter().map(|v| v[p].0).min()?;
            let end = spans.iter().map(|v| v[p].1).max()?;
            Some(end - start)
        })
        .min()
        .unwrap_or(Duration::ZERO)
}

/// Memory read bandwidth in GB/s (10⁹ bytes per second) with `threads` threads reading disjoint
/// parts of one `buffer_bytes` buffer, best of `passes` passes.
///
/// The buffer is first written by the thread that will read each part (so its pages exist and,
/// on multi-socket machines, sit near that thread); untouched pages would all map the kernel's
/// zero page and measure the cache instead. Reads are 32-byte aligned AVX2 loads into four
/// independent accumulators when the CPU has AVX2 (detected at run time), else a portable loop
/// the compiler vectorizes. Each thread's sum is passed through [`black_box`], so no read can be
/// optimized away.
///
/// `threads` and `passes` below 1 count as 1; the buffer is rounded down to whole 64-byte lines
/// per thread (at least one line each). For a meaningful figure `buffer_bytes` must be many
/// times the last-level cache.
pub fn read_bandwidth(threads: usize, buffer_bytes: usize, passes: usize) -> f64 {
    let threads = threads.max(1);
    let passes = passes.max(1);
    let per_thread = (buffer_bytes / 64 / threads).max(1);
    let n_lines = per_thread * threads;
    // `vec![0u64; n]` comes from a zeroing allocator that maps pages lazily; the threads below
    // fault them in.
    let mut raw = vec![0u64; n_lines * 8 + 8];
    // SAFETY: `Line` is plain `u64`s, so every bit pattern is valid and re-viewing the aligned
    // middle of a `u64` buffer as lines is sound; the spare 8 words guarantee room for
    // `n_lines` whole lines after the aligned start.
    let (_, lines, _) = unsafe { raw.align_to_mut::<Line>() };
    let lines = &mut lines[..n_lines];
    let bytes = (n_lines * 64) as f64;
    let avx2 = has_avx2();

    let parts: Vec<std::sync::Mutex<Option<&mut [Line]>>> = lines
        .chunks_mut(per_thread)
        .map(|c| std::sync::Mutex::new(Some(c)))
        .collect();
    let best = timed_passes(threads, passes, |t| {
        let part = parts[t]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        // First touch: a non-zero pattern written by the reading thread.
        for (i, l) in part.iter_mut().enumerate() {
            *l = Line([i as u64 | 1; 8]);
        }
        let part: &[Line] = part;
        Box::new(move || {
            black_box(sum_lines(black_box(part), avx2));
        })
    });
    bytes / best.as_secs_f64().max(1e-9) / 1e9
}

/// Sums every 64-bit word of `lines` (wrapping), the work of one bandwidth pass.
fn sum_lines(lines: &[Line], avx2: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the CPU reports AVX2 (checked at run time).
        return unsafe { sum_lines_avx2(lines) };
    }
    let _ = avx2;
    sum_lines_portable(lines)
}

/// Portable read loop: eight independent lanes the compiler turns into vector adds.
fn sum_lines_portable(lines: &[Line]) -> u64 {
    let mut acc = [0u64; 8];
    for l in lines {
        for (a, &w) in acc.iter_mut().zip(&l.0) {
            *a = a.wrapping_add(w);
        }
    }
    acc.iter().fold(0, |a, &b| a.wrapping_add(b))
}

/// AVX2 read loop: two lines (four aligned 32-byte loads) per iteration into four accumulators,
/// so loads are never waiting on each other's adds.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_lines_avx2(lines: &[Line]) -> u64 {
    use std::arch::x86_64::*;
    let mut a0 = _mm256_setzero_si256();
    let mut a1 = _mm256_setzero_si256();
    let mut a2 = _mm256_setzero_si256();
    let mut a3 = _mm256_setzero_si256();
    let pairs = lines.chunks_exact(2);
    let rest = pairs.remainder();
    for pair in pairs {
        let p = pair.as_ptr() as *const __m256i;
        // SAFETY: `pair` is two 64-byte-aligned lines = four aligned 32-byte vectors.
        unsafe {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(p));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(p.add(1)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256(p.add(2)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256(p.add(3)));
        }
    }
    for l in rest {
        let p = l as *const Line as *const __m256i;
        // SAFETY: one aligned line = two aligned 32-byte vectors.
        unsafe {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(p));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(p.add(1)));
        }
    }
    let s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    let mut out = [0u64; 4];
    // SAFETY: `out` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, s) };
    out.iter().fold(0, |a, &b| a.wrapping_add(b))
}

/// Multiply-add iterations per thread per pass in [`run`]: with 12 vector accumulators that is
/// 12 · 2²² FMAs, about 10–20 ms per pass on a 3 GHz core with two FMA pipes.
pub const FMA_ITERS: u64 = 1 << 22;

/// Independent vector accumulators of the FMA probe: enough to cover FMA latency (4–5 cycles)
/// times throughput (2 per cycle) with room to spare, few enough to stay in 16 registers.
const FMA_ACCS: usize = 12;

/// Peak f32 multiply-add rate over `threads` threads in GFLOP/s (an FMA counts as 2 FLOPs),
/// best of `passes` passes of `iters` iterations per thread.
///
/// Each thread keeps independent accumulators in registers and updates them with no memory
/// traffic: 12 AVX2 FMA vectors (8 lanes each) per iteration when the CPU has AVX2+FMA, else a
/// portable multiply-then-add loop the compiler vectorizes (counted as 2 FLOPs per lane). This
/// is the compute roof of the machine for f32; quantized kernels do integer work and are
/// measured by [`q4_1_matmul_gflops`].
pub fn fma_gflops(threads: usize, iters: u64, passes: usize) -> f64 {
    let threads = threads.max(1);
    let passes = passes.max(1);
    let iters = iters.max(1);
    let fma = has_avx2_fma();
    let flops_per_iter = if fma {
        (FMA_ACCS * 8 * 2) as f64
    } else {
        (PORTABLE_LANES * 2) as f64
    };
    let best = timed_passes(threads, passes, |_| {
        Box::new(move || {
            black_box(fma_loop(black_box(iters), fma));
        })
    });
    flops_per_iter * iters as f64 * threads as f64 / best.as_secs_f64().max(1e-9) / 1e9
}

/// Lanes of the portable arithmetic loop.
const PORTABLE_LANES: usize = 64;

fn fma_loop(iters: u64, fma: bool) -> f32 {
    // Values that keep the accumulators bounded and normal: acc → acc·m + c converges to
    // c / (1 − m) = 1, so nothing overflows or goes subnormal however long the loop runs.
    let m = black_box(0.999_f32);
    let c = black_box(0.001_f32);
    #[cfg(target_arch = "x86_64")]
    if fma {
        // SAFETY: `fma` is true only when the CPU reports AVX2 and FMA.
        return unsafe { fma_loop_avx2(iters, m, c) };
    }
    let _ = fma;
    let mut acc = [0.5f32; PORTABLE_LANES];
    for (i, a) in acc.iter_mut().enumerate() {
        *a += i as f32 * 1e-3;
    }
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = *a * m + c;
        }
    }
    acc.iter().sum()
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop_avx2(iters: u64, m: f32, c: f32) -> f32 {
    use std::arch::x86_64::*;
    let vm = _mm256_set1_ps(m);
    let vc = _mm256_set1_ps(c);
    let mut acc = [_mm256_setzero_ps(); FMA_ACCS];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = _mm256_set1_ps(0.5 + i as f32 * 1e-3);
    }
    for _ in 0..iters {
        // A fixed-count loop over a register array: unrolled, each accumulator its own register.
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, vm, vc);
        }
    }
    let mut s = _mm256_setzero_ps();
    for a in acc {
        s = _mm256_add_ps(s, a);
    }
    let mut out = [0f32; 8];
    // SAFETY: `out` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
    out.iter().sum()
}

/// Shape of the matmul probe: `batch` activation rows times a `rows × cols` weight matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Weight rows (output features).
    pub rows: usize,
    /// Weight columns (input features); rounded up to a multiple of 32, the Q4_1 block.
    pub cols: usize,
    /// Activation rows multiplied at once.
    pub batch: usize,
}

impl Default for MatmulShape {
    /// SmolLM2-135M's FFN gate/up shape (1536 × 576; 553 KB in Q4_1, about half an L2 per
    /// core on two cores) against 64 activation rows: compute-bound, so the figure is the
    /// kernel's arithmetic rate, not memory's.
    fn default() -> Self {
        MatmulShape {
            rows: 1536,
            cols: 576,
            batch: 64,
        }
    }
}

/// Throughput of ridge's real quantized matmul (`ridge_kernels::matmul`, Q4_1 weights × 8-bit
/// activations, on the kernel's own thread pool and the best path of this CPU) in GFLOP/s,
/// counting `2 · rows · cols · batch` FLOPs per call. Best of `passes` timings of several
/// back-to-back calls, after one warm-up call, on data that stays in cache.
pub fn q4_1_matmul_gflops(shape: MatmulShape, passes: usize) -> f64 {
    let rows = shape.rows.max(1);
    let cols = shape.cols.max(1).div_ceil(32) * 32;
    let n = shape.batch.max(1);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        // xorshift64*: plenty for filler data.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        ((rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let mut data = Vec::with_capacity(rows * DType::Q4_1.row_bytes(cols));
    let mut row = vec![0f32; cols];
    for _ in 0..rows {
        row.iter_mut().for_each(|v| *v = rand());
        data.extend_from_slice(&blocks::quantize_row(DType::Q4_1, &row));
    }
    let Some(w) = WeightMatrix::new(DType::Q4_1, rows, cols, &data) else {
        return 0.0;
    };
    let x: Vec<f32> = (0..n * cols).map(|_| rand()).collect();
    let mut y = vec![0f32; n * rows];
    let mut scratch = MatmulScratch::default();
    let isa = Isa::detect();
    let mut call = |y: &mut [f32]| {
        matmul(
            isa,
            ActPrecision::Int8,
            &w,
            black_box(&x),
            n,
            y,
            &mut scratch,
        );
        black_box(&*y);
    };
    // Warm-up: spins up the pool, brings the matrix into cache; also sizes the timed batch to
    // about 20 ms so timer resolution and pool wake-ups do not dominate.
    let t0 = Instant::now();
    call(&mut y);
    let one = t0.elapsed().as_secs_f64().max(1e-6);
    let calls = ((0.02 / one) as usize).clamp(3, 1000);
    let mut best = f64::INFINITY;
    for _ in 0..passes.max(1) {
        let t0 = Instant::now();
        for _ in 0..calls {
            call(&mut y);
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * rows as f64 * cols as f64 * n as f64 * calls as f64 / best.max(1e-9) / 1e9
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn the_cache_size_override_parses_sizes_and_none() {
        assert_eq!(llc_override("300M"), Some(Some(300 << 20)));
        assert_eq!(llc_override(" 4096 "), Some(Some(4096)));
        assert_eq!(llc_override("0"), Some(None));
        assert_eq!(llc_override("None"), Some(None));
        assert_eq!(llc_override("big"), None);
        assert_eq!(llc_override("-1"), None);
    }

    #[test]
    fn a_working_set_that_fits_the_llc_is_read_from_it() {
        let llc = Some(CacheProbe {
            bytes: 300 << 20,
            read_bandwidth_gbs: 400.0,
        });
        // SmolLM2's 97 MB in a 300 MB L3: the cache's bandwidth bounds the step.
        assert_eq!(memory_level(97e6, 25.0, llc), ("LLC", 400.0));
        // Qwen2.5 1.5B's 1.1 GB does not fit: DRAM.
        assert_eq!(memory_level(1.1e9, 25.0, llc), ("DRAM", 25.0));
        // Just past the usable share of the cache: DRAM.
        assert_eq!(memory_level(0.76 * (300 << 20) as f64, 25.0, llc).0, "DRAM");
        assert_eq!(memory_level(1e3, 25.0, None), ("DRAM", 25.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize) -> Vec<Line> {
        (0..n as u64)
            .map(|i| Line([i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7]))
            .collect()
    }

    #[test]
    fn read_loops_agree_with_a_plain_sum() {
        for n in [0, 1, 2, 3, 17, 64] {
            let v = lines(n);
            let want = v
                .iter()
                .flat_map(|l| l.0)
                .fold(0u64, |a, b| a.wrapping_add(b));
            assert_eq!(sum_lines_portable(&v), want, "portable, {n} lines");
            assert_eq!(sum_lines(&v, has_avx2()), want, "dispatched, {n} lines");
        }
    }

    #[test]
    fn fma_loops_agree() {
        let portable = fma_loop(1000, false) / PORTABLE_LANES as f32;
        // Both converge towards 1 from about 0.5.
        assert!(portable > 0.5 && portable < 1.0, "{portable}");
        if has_avx2_fma() {
            let simd = fma_loop(1000, true) / (FMA_ACCS * 8) as f32;
            assert!((simd - portable).abs() < 0.05, "{simd} vs {portable}");
        }
    }

    #[test]
    fn probes_return_positive_rates() {
        // Small sizes: this checks the plumbing, not the machine.
        let bw = read_bandwidth(2, 4 << 20, 2);
        assert!(bw.is_finite() && bw > 0.0, "{bw}");
        // Degenerate arguments are clamped, not trusted.
        assert!(read_bandwidth(0, 0, 0) > 0.0);
        let f = fma_gflops(1, 10_000, 2);
        assert!(f.is_finite() && f > 0.0, "{f}");
        let m = q4_1_matmul_gflops(
            MatmulShape {
                rows: 64,
                cols: 40,
                batch: 3,
            },
            1,
        );
        assert!(m.is_finite() && m > 0.0, "{m}");
    }

    #[test]
    fn a_slow_first_probe_is_replaced_by_a_re_measure() {
        // A first probe that ran while other processes loaded the cores: 0.001 GB/s of DRAM
        // and of cache. Re-measuring keeps the faster reading of each level.
        let slow_llc = llc_bytes().map(|bytes| CacheProbe {
            bytes,
            read_bandwidth_gbs: 0.001,
        });
        let slow = FloorBandwidth::from_probe(1e9, 0.001, slow_llc);
        let again = slow.remeasured(1e9, 1);
        assert_eq!(again.level, slow.level);
        assert!(again.gbs > 0.1, "{again:?}");
        assert!(again.dram_gbs.is_some_and(|d| d > 0.1), "{again:?}");
        // Never lower: a faster first reading stays.
        let fast = FloorBandwidth::from_probe(1e9, 1e6, None);
        assert_eq!(fast.remeasured(1e9, 1).dram_gbs, Some(1e6));
        // A given bandwidth is the user's.
        let given = FloorBandwidth::choose(1e9, Some(3.0), 1);
        assert_eq!(given.remeasured(1e9, 1), given);
    }

    #[test]
    fn quick_probe_skips_compute() {
        let r = run(&ProbeConfig {
            buffer_bytes: 1 << 20,
            passes: 1,
            ..ProbeConfig::quick(1)
        });
        assert!(r.read_bandwidth_gbs > 0.0);
        assert!(r.fma_gflops.is_none() && r.q4_1_matmul_gflops.is_none());
        assert!(r.int8.is_none() && r.bf16_gflops.is_none());
        assert_eq!(r.threads, 1);
    }
}
