//! Run-time CPU feature detection: decided once, then passed to every kernel call.
//!
//! Paths nest: every AVX-512 CPU ridge accepts also takes every AVX2 kernel, and only the
//! kernels that gain from AVX-512 (the integer tile products, see `dot_tiles_vnni`) have a
//! version of their own. `RIDGE_ISA=avx2` or `RIDGE_ISA=scalar` forces a narrower path, so one
//! machine can measure and test all three.

/// The instruction-set path a kernel call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable scalar reference code.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// [`Isa::Avx2`] plus AVX-512 F/BW/VL and VNNI: 32 vector registers and `vpdpbusd`, the
    /// 8-bit dot product that replaces `pmaddubsw` + `pmaddwd` + add.
    Avx512,
}

impl Isa {
    /// The best path this CPU supports. `RIDGE_ISA=scalar` forces the reference path,
    /// `RIDGE_ISA=avx2` the AVX2 kernels on an AVX-512 CPU.
    pub fn detect() -> Isa {
        let forced = std::env::var("RIDGE_ISA").ok();
        if forced.as_deref() == Some("scalar") {
            return Isa::Scalar;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                let avx512 = is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni");
                if avx512 && forced.as_deref() != Some("avx2") {
                    return Isa::Avx512;
                }
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// Every path this CPU can run, narrowest first (tests compare each against the scalar
    /// reference).
    pub fn available() -> Vec<Isa> {
        let best = Isa::detect();
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i == Isa::Scalar || i == best || (i == Isa::Avx2 && best.avx2()))
            .collect()
    }

    /// Whether the AVX2/FMA/F16C kernels may run (true for [`Isa::Avx512`] too).
    pub fn avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512)
    }

    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2+fma+f16c",
            Isa::Avx512 => "avx512+vnni",
        }
    }
}
