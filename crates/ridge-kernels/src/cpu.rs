//! Run-time CPU feature detection: decided once, then passed to every kernel call.

/// The instruction-set path a kernel call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable scalar reference code.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
}

impl Isa {
    /// The best path this CPU supports. `RIDGE_ISA=scalar` forces the reference path.
    pub fn detect() -> Isa {
        if std::env::var("RIDGE_ISA").is_ok_and(|v| v == "scalar") {
            return Isa::Scalar;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2+fma+f16c",
        }
    }
}
