//! Which AVX-512 instructions compete with `vpdpbusd` for the same execution ports: the
//! ceiling of the int8 tile kernels below the probed multiply-add peak.
//!
//! A tile kernel's inner loop is `vpdpbusd` (64 multiply-adds) plus, per 32-element
//! sub-block and token, the float steps that scale its integer sum (`vmulps`, `vfmadd`,
//! `vcvtdq2ps`). If those float ops issue on the ports the dot products use, every one of
//! them costs a dot product's slot, and a kernel can reach at most `dp / (dp + shared)` of the
//! peak however well it is scheduled. This runs 12 independent `vpdpbusd` chains per
//! iteration alone, then with 8 independent ops of each kind beside them, and prints the
//! extra time per added op as a fraction of one `vpdpbusd`'s issue slot: about 0 = another
//! port, about 1 = the same ports.
//!
//! ```sh
//! cargo run --release -p ridge-kernels --example pipes
//! ```
//!
//! On the 2-core AMD EPYC Zen 5 VM (family 26 model 2) of 2026-12-04: `vmulps`, `vfmadd231ps`,
//! `vpmulld`, `vpmaddwd` 0.96–0.99 (the dot products' ports), `vaddps`, `vpaddd`, `vpsrlw`,
//! `vcvtdq2ps`, `vpandd` −0.05–0.01 (other ports); one `vpdpbusd` slot 0.133 ns (two per cycle).
//! On the Zen 4 VM (family 25 model 17) of the same day: one slot 0.280 ns (one 512-bit
//! `vpdpbusd` per cycle), the same four ops 0.94–0.98; `vpaddd`, `vpsrlw`, `vcvtdq2ps`,
//! `vpandd` and a broadcast load ~0; `vinserti64x4`, `vshufi64x2` and a masked 256-bit load
//! ~0.2; two 256-bit loads joined by `vinserti64x4` (the pair kernels' `ld2`) ~0.5 — yet a
//! masked load in its place measured no faster in the kernels (`mv_bw`, 3 rounds). Session 25,
//! same CPU: `vpsllvd` ~0 and `vpdpwssd` 0.99, while a merge-masked `vpaddd` with a broadcast
//! operand costs 0.60 and `vpternlogd` 0.48 (three-source forms share the `vpdpbusd` ports) —
//! why the Q4_K kernel's exponent add is a plain add behind a per-sub-block zero test.

#[cfg(target_arch = "x86_64")]
mod run {
    use std::arch::x86_64::*;
    use std::hint::black_box;
    use std::time::Instant;

    const ITERS: usize = 20_000_000;

    /// Nanoseconds per iteration of 12 `vpdpbusd` chains plus `extra` applied to 8 registers.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn time(extra: u8) -> f64 {
        let w = black_box(_mm512_set1_epi8(3));
        let x = black_box(_mm512_set1_epi8(5));
        let m = black_box(_mm512_set1_ps(1.0001));
        let mut a: [__m512i; 12] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32));
        let mut f: [__m512; 8] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        let mut b: [__m512i; 8] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32 + 1));
        // The memory operands of ops 11, 12 and 14: every load below stays inside `buf`
        // (the highest byte read is 215; op 12's masked-off lower half is not read).
        let buf = [7u8; 256];
        let p = black_box(buf.as_ptr());
        let start = Instant::now();
        for _ in 0..ITERS {
            for v in a.iter_mut() {
                *v = _mm512_dpbusd_epi32(*v, w, x);
            }
            match extra {
                1 => f.iter_mut().for_each(|v| *v = _mm512_mul_ps(*v, m)),
                2 => f.iter_mut().for_each(|v| *v = _mm512_fmadd_ps(*v, m, m)),
                3 => f.iter_mut().for_each(|v| *v = _mm512_add_ps(*v, m)),
                4 => b.iter_mut().for_each(|v| *v = _mm512_mullo_epi32(*v, w)),
                5 => b.iter_mut().for_each(|v| *v = _mm512_madd_epi16(*v, w)),
                6 => b.iter_mut().for_each(|v| *v = _mm512_add_epi32(*v, w)),
                7 => b.iter_mut().for_each(|v| *v = _mm512_srli_epi16::<1>(*v)),
                8 => b
                    .iter_mut()
                    .for_each(|v| *v = _mm512_castps_si512(_mm512_cvtepi32_ps(*v))),
                9 => b.iter_mut().for_each(|v| *v = _mm512_and_si512(*v, w)),
                10 => b
                    .iter_mut()
                    .for_each(|v| *v = _mm512_inserti64x4::<1>(*v, _mm512_castsi512_si256(w))),
                11 => b.iter_mut().enumerate().for_each(|(i, v)| {
                    // Two 256-bit loads joined (the pair kernels' `ld2`), then a free-port xor.
                    let lo = _mm256_loadu_si256(p.add(8 * i) as *const __m256i);
                    let hi = _mm256_loadu_si256(p.add(128 + 8 * i) as *const __m256i);
                    let j = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                    *v = _mm512_xor_si512(*v, j)
                }),
                12 => b.iter_mut().enumerate().for_each(|(i, v)| {
                    // The upper half merged from memory by a masked load.
                    *v = _mm512_mask_loadu_epi64(*v, 0xF0, p.add(8 * i) as *const i64)
                }),
                13 => b
                    .iter_mut()
                    .for_each(|v| *v = _mm512_shuffle_i64x2::<0x4E>(*v, *v)),
                14 => b.iter_mut().enumerate().for_each(|(i, v)| {
                    // A 32-bit broadcast from memory (the activations' `bcast4`), then an xor.
                    let j = _mm512_set1_epi32((p.add(4 * i) as *const i32).read_unaligned());
                    *v = _mm512_xor_si512(*v, j)
                }),
                15 => b
                    .iter_mut()
                    .for_each(|v| *v = _mm512_sllv_epi32(*v, _mm512_set1_epi32(1))),
                16 => b.iter_mut().enumerate().for_each(|(i, v)| {
                    // A merge-masked add of a broadcast from memory (an exponent add).
                    let j = _mm512_set1_epi32((p.add(4 * i) as *const i32).read_unaligned());
                    *v = _mm512_mask_add_epi32(*v, 0x7FFF, *v, j)
                }),
                17 => b.iter_mut().enumerate().for_each(|(i, v)| {
                    let j = _mm512_set1_epi32((p.add(4 * i) as *const i32).read_unaligned());
                    *v = _mm512_ternarylogic_epi32::<0xCA>(j, *v, w)
                }),
                18 => b
                    .iter_mut()
                    .for_each(|v| *v = _mm512_dpwssd_epi32(*v, w, x)),
                _ => {}
            }
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / ITERS as f64;
        black_box((a, f, b));
        ns
    }

    pub fn main() {
        let ok = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni");
        if !ok {
            eprintln!("pipes: this CPU lacks AVX-512 VNNI; nothing to measure");
            std::process::exit(1);
        }
        // SAFETY: the features were detected just above.
        let base = unsafe { time(0) }.min(unsafe { time(0) });
        let slot = base / 12.0;
        println!("12 vpdpbusd chains: {base:.3} ns/iteration ({slot:.3} ns per vpdpbusd)");
        let ops = [
            (1, "vmulps"),
            (2, "vfmadd231ps"),
            (3, "vaddps"),
            (4, "vpmulld"),
            (5, "vpmaddwd"),
            (6, "vpaddd"),
            (7, "vpsrlw"),
            (8, "vcvtdq2ps"),
            (9, "vpandd"),
            (10, "vinserti64x4 (reg)"),
            (11, "2 loads + vinserti64x4"),
            (12, "masked 256-bit load"),
            (13, "vshufi64x2"),
            (14, "vpbroadcastd (mem)"),
            (15, "vpsllvd"),
            (16, "masked vpaddd (mem)"),
            (17, "vpternlogd (mem)"),
            (18, "vpdpwssd"),
        ];
        for (k, name) in ops {
            // SAFETY: as above.
            let t = unsafe { time(k) }.min(unsafe { time(k) });
            let per = (t - base) / 8.0 / slot;
            println!("+ 8 {name:<20} {t:.3} ns/iteration: {per:+.2} vpdpbusd slots per op");
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    run::main();
    #[cfg(not(target_arch = "x86_64"))]
    eprintln!("pipes: x86-64 only");
}
