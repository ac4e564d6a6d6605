//! Run-time CPU feature detection: decided once, then passed to every kernel call.
//!
//! Paths nest: every AVX-512 CPU ridge accepts also takes every AVX2 kernel, and only the
//! kernels that gain from AVX-512 (the integer tile products, see `x86::avx512`) have a
//! version of their own. `RIDGE_ISA=avx2` or `RIDGE_ISA=scalar` forces a narrower path, so one
//! machine can measure and test all three.
//!
//! # Why [`Isa`] is opaque
//!
//! Safe kernel entry points (`ops::rms_norm(isa, …)`, `matmul(isa, …)`) call
//! `#[target_feature]` code when `isa` says the CPU has the feature; their `SAFETY` comments
//! rest on an [`Isa`] never naming a path the CPU lacks. So an `Isa` cannot be built from its
//! [`IsaKind`]: the only ways to hold one are [`Isa::SCALAR`] (runs anywhere) and detection
//! ([`Isa::detect`], [`Isa::available`], [`Isa::of`]), each of which checks the CPU first. No
//! safe call can reach an instruction the CPU does not have.

use crate::dispatch::{self, Kernels};

/// Which path an [`Isa`] takes: for matching and naming. It cannot make an [`Isa`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IsaKind {
    /// Portable scalar reference code.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// [`IsaKind::Avx2`] plus AVX-512 F/BW/VL and VNNI: 32 vector registers and `vpdpbusd`,
    /// the 8-bit dot product that replaces `pmaddubsw` + `pmaddwd` + add.
    Avx512,
    /// [`IsaKind::Avx512`] plus AMX-TILE and AMX-INT8 with the tile state granted by the
    /// kernel: 16 × 16 × 64 8-bit products per instruction for blocks of 16 tokens.
    Amx,
}

/// The instruction-set path a kernel call takes: one this CPU supports (see the module docs),
/// with its dispatch table ([`crate::dispatch`]), chosen when the `Isa` is made.
#[derive(Clone, Copy)]
pub struct Isa(IsaKind, &'static Kernels);

impl PartialEq for Isa {
    fn eq(&self, other: &Isa) -> bool {
        self.0 == other.0
    }
}

impl Eq for Isa {}

impl std::hash::Hash for Isa {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}

impl std::fmt::Debug for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Isa").field(&self.0).finish()
    }
}

/// Whether this CPU runs `kind`'s kernels (the hardware's answer; `RIDGE_ISA` plays no part).
fn supported(kind: IsaKind) -> bool {
    match kind {
        IsaKind::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        IsaKind::Avx2 => {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(target_arch = "x86_64")]
        IsaKind::Avx512 => {
            supported(IsaKind::Avx2)
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(target_arch = "x86_64")]
        IsaKind::Amx => supported(IsaKind::Avx512) && crate::x86::amx::tile::permitted(),
        #[cfg(not(target_arch = "x86_64"))]
        _ => false,
    }
}

impl Isa {
    /// The portable reference path, which every CPU runs.
    pub const SCALAR: Isa = Isa(IsaKind::Scalar, table(IsaKind::Scalar));

    /// The best path this CPU supports. `RIDGE_ISA=scalar` forces the reference path,
    /// `RIDGE_ISA=avx2` the AVX2 kernels on an AVX-512 CPU, `RIDGE_ISA=avx512` the VNNI
    /// kernels on an AMX CPU.
    pub fn detect() -> Isa {
        let forced = std::env::var("RIDGE_ISA").ok();
        let best = match forced.as_deref() {
            Some("scalar") => IsaKind::Scalar,
            Some("avx2") => IsaKind::Avx2,
            Some("avx512") => IsaKind::Avx512,
            _ => IsaKind::Amx,
        };
        [IsaKind::Amx, IsaKind::Avx512, IsaKind::Avx2]
            .into_iter()
            .filter(|&k| k as u8 <= best as u8)
            .find_map(Isa::of)
            .unwrap_or(Isa::SCALAR)
    }

    /// `kind`'s path if this CPU supports it, whatever `RIDGE_ISA` says.
    pub fn of(kind: IsaKind) -> Option<Isa> {
        supported(kind).then(|| Isa(kind, table(kind)))
    }

    /// Every path up to [`Isa::detect`]'s, narrowest first (tests compare each against the
    /// scalar reference).
    pub fn available() -> Vec<Isa> {
        let best = Isa::detect();
        [
            IsaKind::Scalar,
            IsaKind::Avx2,
            IsaKind::Avx512,
            IsaKind::Amx,
        ]
        .into_iter()
        .filter(|&k| k as u8 <= best.0 as u8)
        .filter_map(Isa::of)
        .collect()
    }

    /// This path's kernels.
    #[inline]
    pub(crate) fn kernels(self) -> &'static Kernels {
        self.1
    }

    /// Which path this is.
    pub fn kind(self) -> IsaKind {
        self.0
    }

    /// Whether the AVX2/FMA/F16C kernels may run (true for the wider paths too).
    pub fn avx2(self) -> bool {
        matches!(self.0, IsaKind::Avx2 | IsaKind::Avx512 | IsaKind::Amx)
    }

    /// Whether the AVX-512 F/BW/VL/VNNI kernels may run (true for [`IsaKind::Amx`] too).
    pub fn avx512(self) -> bool {
        matches!(self.0, IsaKind::Avx512 | IsaKind::Amx)
    }

    /// Whether the AMX tile products may run.
    pub fn amx(self) -> bool {
        self.0 == IsaKind::Amx
    }

    /// Runs the AMX tile unit's peak loop (`iters` iterations of four 16 × 16 × 64 products,
    /// every operand in tile registers; into four independent accumulators, or with `chained`
    /// all into one) for the probe's compute roof; returns the multiply-adds done and a
    /// checksum (`−64 · iters` for int8, `−32 · iters` for bf16, four times that chained), or
    /// `None` unless this is the AMX path (and, for `bf16`, the CPU has AMX-BF16).
    pub fn amx_peak_loop(self, bf16: bool, chained: bool, iters: u64) -> Option<(u64, i32)> {
        #[cfg(target_arch = "x86_64")]
        if self.amx() {
            use crate::x86::amx::tile;
            let macs = tile::PEAK_MACS_PER_ITER * iters;
            if bf16 && !tile::has_bf16() {
                return None;
            }
            // SAFETY: an AMX Isa exists only once detection saw AMX-TILE/INT8 and the kernel
            // granted the tile state; the bf16 loops run only where the CPU reports AMX-BF16
            // (checked just above).
            let sum = unsafe {
                match (bf16, chained) {
                    (false, false) => tile::peak_loop::<false, false>(iters),
                    (false, true) => tile::peak_loop::<false, true>(iters),
                    (true, false) => tile::peak_loop::<true, false>(iters),
                    (true, true) => tile::peak_loop::<true, true>(iters),
                }
            };
            return Some((macs, sum));
        }
        let _ = (bf16, chained, iters);
        None
    }

    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self.0 {
            IsaKind::Scalar => "scalar",
            IsaKind::Avx2 => "avx2+fma+f16c",
            IsaKind::Avx512 => "avx512+vnni",
            IsaKind::Amx => "avx512+vnni+amx",
        }
    }
}

/// The table of `kind`'s path (constants promoted to statics). Callers check first that
/// the CPU runs the path.
const fn table(kind: IsaKind) -> &'static Kernels {
    match kind {
        IsaKind::Scalar => &dispatch::SCALAR,
        #[cfg(target_arch = "x86_64")]
        IsaKind::Avx2 => &dispatch::AVX2,
        #[cfg(target_arch = "x86_64")]
        IsaKind::Avx512 => &dispatch::AVX512,
        #[cfg(target_arch = "x86_64")]
        IsaKind::Amx => &dispatch::AMX,
        #[cfg(not(target_arch = "x86_64"))]
        _ => &dispatch::SCALAR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_names_only_paths_the_cpu_has() {
        let best = Isa::detect();
        assert!(supported(best.kind()));
        let all = Isa::available();
        assert_eq!(all.first(), Some(&Isa::SCALAR));
        assert_eq!(all.last(), Some(&best));
        assert!(all.iter().all(|i| supported(i.kind())));
        // Paths nest: every path below the best is available too.
        assert!(all
            .windows(2)
            .all(|w| (w[0].kind() as u8) < (w[1].kind() as u8)));
    }

    #[test]
    fn the_amx_peak_loop_does_its_products() {
        for isa in Isa::available() {
            for chained in [false, true] {
                // Each result element gains 64 products of 1 · −1 per product (int8), 32 bf16
                // pairs of 1.0 · −1.0 (bf16); the first accumulator takes all four chained.
                let times = if chained { 4 } else { 1 };
                let got = isa.amx_peak_loop(false, chained, 10);
                match isa.kind() {
                    IsaKind::Amx => {
                        assert_eq!(got, Some((10 * 4 * 16 * 16 * 64, -640 * times)))
                    }
                    _ => assert_eq!(got, None, "{isa:?}"),
                }
                if let Some((macs, sum)) = isa.amx_peak_loop(true, chained, 10) {
                    assert_eq!((macs, sum), (10 * 4 * 16 * 16 * 64, -320 * times));
                }
            }
        }
    }
}
