//! The grouped attention loop of [`crate::x86::avx2::attention`] compiled with AVX-512VL: the
//! same body (one macro), so the same bits, with 32 vector registers to hold more positions
//! and dimensions per pass instead of spilling them.

crate::x86::avx2::attention::attend_entry!(
    /// `x86::avx2::attention::attend_group` compiled with AVX-512VL's 32 vector registers: the same operations in
    /// the same order (so the same bits), with more positions and dimensions per pass held in
    /// registers instead of spilled (six heads per KV head, as Qwen2.5 has, spilled at 16).
    ///
    /// # Safety
    /// As `x86::avx2::attention::attend_group`, with AVX-512 F/VL detected (an AVX-512 [`crate::Isa`]).
    attend_group_zmm,
    "avx2,fma,f16c,avx512f,avx512vl",
    true
);
