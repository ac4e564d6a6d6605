//! Peak multiply-accumulate rates of the integer and bf16 paths: the compute roofs of
//! prefill and batched decode.
//!
//! ridge's quantized matmuls multiply 8-bit activations by 4–8-bit weights widened to 8 bits,
//! so their roof is the CPU's int8 multiply-accumulate rate on the path ridge runs — AVX-512
//! VNNI's `vpdpbusd` (64 u8·i8 products per instruction) or AVX2's `vpmaddubsw` + `vpmaddwd`
//! (32 products per pair). Each probe keeps independent accumulators in registers (enough to
//! cover the instruction's latency times its throughput) and touches no memory, so the figure
//! is the execution units' limit, the same kind of number as the f32 FMA peak. The bf16 probe
//! (`vdpbf16ps`, AVX-512 BF16) is reported where the CPU has it; ridge's kernels do not use it
//! yet, so no floor rests on it.
//!
//! On a CPU with AMX (and the tile state granted), ridge's steps of 16 tokens or more run on
//! the tile unit, so the int8 roof is the tile unit's: four 16 × 16 × 64 `tdpbssd` products per
//! iteration, operands in tile registers, into four independent accumulators or chained into
//! one, whichever runs faster (`Isa::amx_peak_loop`). The VNNI peak stays in the report beside
//! it, and the AMX bf16 rate (`tdpbf16ps`) is reported like the AVX-512 one.

use std::hint::black_box;

use ridge_kernels::{Isa, IsaKind};

use super::timed_passes;

/// Accumulators of the integer and bf16 loops: latency 4–5 cycles × up to 2 per cycle, with
/// room to spare, and within 16 registers for AVX2.
const ACCS: usize = 12;

/// Iterations per thread per pass: 12 · 2²⁰ instructions, a few ms per pass.
pub const PEAK_ITERS: u64 = 1 << 20;

/// The int8 path the probe measured, with its rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Int8Peak {
    /// Multiply-accumulates per second over all threads, in 10⁹ (one u8·i8 product added).
    pub gmacs: f64,
    /// `"avx512-vnni"` or `"avx2"`.
    pub path: &'static str,
}

/// Peak int8 multiply-accumulate rate of `isa`'s path over `threads` threads, best of
/// `passes`; `None` on the scalar path (ridge's scalar kernels are a reference, not a roof).
pub fn int8_peak(isa: Isa, threads: usize, iters: u64, passes: usize) -> Option<Int8Peak> {
    let threads = threads.max(1);
    let iters = iters.max(1);
    if isa.amx() {
        return amx_peak(isa, false, threads, iters, passes).map(|gmacs| Int8Peak {
            gmacs,
            path: "amx-int8",
        });
    }
    let (path, macs_per_iter) = match isa.kind() {
        IsaKind::Avx512 | IsaKind::Amx => ("avx512-vnni", ACCS * 64),
        IsaKind::Avx2 => ("avx2", ACCS * 32),
        IsaKind::Scalar => return None,
    };
    let best = timed_passes(threads, passes.max(1), |_| {
        Box::new(move || {
            black_box(int8_loop(isa, black_box(iters)));
        })
    });
    Some(Int8Peak {
        gmacs: (macs_per_iter as u64 * iters) as f64 * threads as f64
            / best.as_secs_f64().max(1e-9)
            / 1e9,
        path,
    })
}

/// Iterations of the AMX loop per `iters` of the vector loops: one iteration is four tile
/// products (65,536 multiply-adds, about 64 cycles), so a pass lasts about as long.
const AMX_ITERS_DIV: u64 = 16;

/// The AMX tile unit's peak over `threads` threads, best of `passes` of each loop form (four
/// independent accumulators, and one chained: which is faster differs by CPU), in 10⁹
/// multiply-adds per second (int8, or bf16 with `bf16`); `None` off the AMX path or without
/// AMX-BF16.
fn amx_peak(isa: Isa, bf16: bool, threads: usize, iters: u64, passes: usize) -> Option<f64> {
    let iters = (iters / AMX_ITERS_DIV).max(1);
    let (macs, _) = isa.amx_peak_loop(bf16, false, 1)?;
    let best = [false, true]
        .into_iter()
        .map(|chained| {
            timed_passes(threads.max(1), passes.max(1), |_| {
                Box::new(move || {
                    black_box(isa.amx_peak_loop(bf16, chained, black_box(iters)));
                })
            })
        })
        .min()?;
    Some((macs * iters) as f64 * threads.max(1) as f64 / best.as_secs_f64().max(1e-9) / 1e9)
}

/// Peak bf16 rate of the AMX tile unit (`tdpbf16ps`, 2 FLOPs per product) over `threads`
/// threads in GFLOP/s, best of `passes`; `None` where the CPU lacks AMX-BF16 or ridge runs
/// below the AMX path. No ridge kernel uses it: it is reported beside the int8 roof.
pub fn amx_bf16_gflops(threads: usize, iters: u64, passes: usize) -> Option<f64> {
    amx_peak(Isa::detect(), true, threads, iters, passes).map(|g| 2.0 * g)
}

fn int8_loop(isa: Isa, iters: u64) -> i32 {
    #[cfg(target_arch = "x86_64")]
    match isa.kind() {
        // SAFETY: an Isa of this kind exists only once detection saw AVX-512 F/BW/VL/VNNI.
        IsaKind::Avx512 | IsaKind::Amx => return unsafe { vnni_loop(iters) },
        // SAFETY: an Isa of this kind exists only once detection saw AVX2/FMA/F16C.
        IsaKind::Avx2 => return unsafe { avx2_int8_loop(iters) },
        IsaKind::Scalar => {}
    }
    let _ = (isa, iters);
    0
}

/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_loop(iters: u64) -> i32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_epi8(black_box(1));
    let b = _mm512_set1_epi8(black_box(-1));
    let mut acc = [_mm512_setzero_si512(); ACCS];
    for (i, x) in acc.iter_mut().enumerate() {
        *x = _mm512_set1_epi32(i as i32);
    }
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_dpbusd_epi32(*x, a, b);
        }
    }
    let mut s = _mm512_setzero_si512();
    for x in acc {
        s = _mm512_add_epi32(s, x);
    }
    _mm512_reduce_add_epi32(s)
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_int8_loop(iters: u64) -> i32 {
    use std::arch::x86_64::*;
    let b = _mm256_set1_epi8(black_box(-1));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); ACCS];
    for (i, x) in acc.iter_mut().enumerate() {
        *x = _mm256_set1_epi32(avx2_seed(i));
    }
    for _ in 0..iters {
        for x in acc.iter_mut() {
            // The pair ridge's AVX2 kernels use: u8·i8 → i16 pairs → i32, then accumulate.
            // The accumulator's own bytes are the u8 operand, so no product is loop-invariant
            // (the compiler would hoist one out, and the "peak" would count additions only).
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(*x, b), ones);
            *x = _mm256_add_epi32(*x, p);
        }
    }
    let mut s = _mm256_setzero_si256();
    for x in acc {
        s = _mm256_add_epi32(s, x);
    }
    let mut out = [0i32; 8];
    // SAFETY: `out` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), s) };
    out.iter().fold(0i32, |t, &v| t.wrapping_add(v))
}

/// The AVX2 loop's starting value of accumulator `i` (large, so the lanes stay busy).
fn avx2_seed(i: usize) -> i32 {
    0x1000_0000 + i as i32 * 0x0101_0101
}

/// Whether the CPU has AVX-512 BF16 (and the F/BW it builds on).
fn has_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Peak bf16 dot-product rate (`vdpbf16ps`, 2 FLOPs per product) over `threads` threads in
/// GFLOP/s, best of `passes`; `None` where the CPU lacks AVX-512 BF16 (or `RIDGE_ISA` narrows
/// ridge below AVX-512).
pub fn bf16_gflops(threads: usize, iters: u64, passes: usize) -> Option<f64> {
    if !(has_bf16() && Isa::detect().avx512()) {
        return None;
    }
    let threads = threads.max(1);
    let iters = iters.max(1);
    let best = timed_passes(threads, passes.max(1), |_| {
        Box::new(move || {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: has_bf16() checked AVX-512 F/BW/BF16 above.
            black_box(unsafe { bf16_loop(black_box(iters)) });
        })
    });
    // 16 lanes × 2 products × 2 FLOPs per instruction.
    Some((ACCS as u64 * 64 * iters) as f64 * threads as f64 / best.as_secs_f64().max(1e-9) / 1e9)
}

/// # Safety
/// The CPU must support AVX-512 F, BW and BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn bf16_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    // Products of 2⁻⁸ · 2⁻⁸ add 2⁻¹⁵ per pair: 2²¹ iterations stay far from overflow.
    let v = _mm512_set1_ps(black_box(1.0 / 256.0));
    let a = _mm512_cvtne2ps_pbh(v, v);
    let mut acc = [_mm512_setzero_ps(); ACCS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_dpbf16_ps(*x, a, a);
        }
    }
    let mut s = _mm512_setzero_ps();
    for x in acc {
        s = _mm512_add_ps(s, x);
    }
    _mm512_reduce_add_ps(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loops_compute_what_they_claim() {
        // VNNI: each lane gains 4 · (1 · −1) per iteration, so the sum is fixed. AVX2: each
        // i32 lane x becomes x − Σ(its bytes as u8) per iteration (emulated here).
        let avx2_lane = |mut x: i32| {
            for _ in 0..100 {
                x = x.wrapping_sub(x.to_le_bytes().iter().map(|&b| i32::from(b)).sum::<i32>());
            }
            x
        };
        for isa in Isa::available() {
            let got = int8_loop(isa, 100);
            let want = match isa.kind() {
                IsaKind::Avx512 | IsaKind::Amx => {
                    (0..ACCS as i32).map(|i| 16 * i).sum::<i32>() - 16 * ACCS as i32 * 400
                }
                IsaKind::Avx2 => (0..ACCS)
                    .map(|i| avx2_lane(avx2_seed(i)).wrapping_mul(8))
                    .fold(0i32, i32::wrapping_add),
                IsaKind::Scalar => 0,
            };
            assert_eq!(got, want, "{}", isa.name());
        }
        #[cfg(target_arch = "x86_64")]
        if has_bf16() {
            // SAFETY: checked just above.
            let s = unsafe { bf16_loop(100) };
            // 12 accumulators × 16 lanes × 2 products × 100 iterations × 2⁻¹⁶.
            assert_eq!(s, (ACCS * 16 * 2 * 100) as f32 / 65536.0);
        }
    }

    #[test]
    fn peaks_are_positive_where_a_path_exists() {
        for isa in Isa::available() {
            match int8_peak(isa, 1, 1000, 1) {
                // Under 6 GHz × 1,024 products per cycle (AMX) or × 128 (vectors): a rate
                // above it means the compiler removed multiplies from the loop.
                Some(p) if isa.amx() => {
                    assert!(
                        p.gmacs > 0.0 && p.gmacs < 6144.0 && p.path == "amx-int8",
                        "{p:?}"
                    )
                }
                Some(p) => assert!(p.gmacs > 0.0 && p.gmacs < 768.0, "{p:?}"),
                None => assert_eq!(isa, Isa::SCALAR),
            }
        }
        if let Some(g) = bf16_gflops(1, 1000, 1) {
            assert!(g.is_finite() && g > 0.0);
        }
        match amx_bf16_gflops(1, 1000, 1) {
            Some(g) => assert!(g.is_finite() && g > 0.0 && Isa::detect().amx()),
            // None only off the AMX path or without AMX-BF16 (then the loop refuses too).
            None => assert!(Isa::detect().amx_peak_loop(true, false, 1).is_none()),
        }
    }
}
