//! The AMX tile registers: asking the kernel for them, the one tile configuration ridge uses,
//! and the handful of tile instructions the products need, each a one-line `asm!` (the
//! intrinsics are not stable Rust; the instructions assemble everywhere and run only behind a
//! [`crate::Isa`] whose detection found AMX and got the kernel's permission).
//!
//! # The configuration
//! `tmm0`, `tmm1`: 16 × 16 i32 results (16 tokens × 16 weight rows), used in turn so one
//! sub-block's product runs while the previous one's sums are scaled. `tmm2`/`tmm3`: a
//! 32-element sub-block (activations 16 rows × 32 bytes; weights 8 rows × 64 bytes, each row
//! four consecutive quants of 16 weight rows). `tmm4`/`tmm5`: the same for 16-element
//! sub-blocks (Q6_K).

use std::arch::asm;
use std::sync::OnceLock;

/// Linux's `arch_prctl` request for permission to use an extended state component.
const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
/// The AMX tile data state component (XFEATURE_XTILEDATA).
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// Whether this CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25) and the kernel
/// granted this process the tile state (asked once; a kernel that refuses, or predates AMX,
/// leaves the VNNI path in charge).
pub(crate) fn permitted() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| {
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        let cpu = edx & (1 << 24) != 0 && edx & (1 << 25) != 0;
        // SAFETY: arch_prctl with this request only changes the process's permitted
        // extended state (or fails with an error code); it touches no memory of ours.
        cpu && unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        } == 0
    })
}

/// The 64-byte tile configuration (palette 1) described in the module docs.
#[repr(C, align(64))]
struct Config([u8; 64]);

const fn config() -> Config {
    let mut c = [0u8; 64];
    c[0] = 1;
    // (rows, bytes per row) of tmm0..tmm5.
    let shapes: [(u8, u16); 6] = [(16, 64), (16, 64), (16, 32), (8, 64), (16, 16), (4, 64)];
    let mut t = 0;
    while t < shapes.len() {
        let (rows, colsb) = shapes[t];
        c[16 + 2 * t] = colsb as u8;
        c[17 + 2 * t] = (colsb >> 8) as u8;
        c[48 + t] = rows;
        t += 1;
    }
    Config(c)
}

static CONFIG: Config = config();

/// Loads [`CONFIG`] into this thread's tile registers (zeroing them).
///
/// # Safety
/// [`permitted`] returned true (the CPU has AMX and the kernel granted the tile state).
#[inline(always)]
pub(crate) unsafe fn configure() {
    asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, preserves_flags));
}

/// Returns the tile registers to their initial state (so a context switch saves none).
///
/// # Safety
/// As [`configure`].
#[inline(always)]
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, preserves_flags));
}

/// `tmm{A}` ← 16 rows of `tmm{A}`'s width from `p`, `stride` bytes apart.
///
/// # Safety
/// [`configure`] ran on this thread; the 16 rows lie in readable memory.
#[inline(always)]
pub(crate) unsafe fn load<const A: u8>(p: *const u8, stride: usize) {
    asm!("tileloadd tmm{a}, [{p} + {s}*1]", a = const A, p = in(reg) p, s = in(reg) stride,
        options(nostack, preserves_flags, readonly));
}

/// `tmm{C}` ← 0.
///
/// # Safety
/// [`configure`] ran on this thread.
#[inline(always)]
pub(crate) unsafe fn zero<const C: u8>() {
    asm!("tilezero tmm{c}", c = const C, options(nostack, preserves_flags, nomem));
}

/// `tmm{C}` += signed `tmm{A}` bytes · unsigned `tmm{B}` bytes (`tdpbsud`), or with `SIGNED`
/// signed · signed (`tdpbssd`), four byte pairs per 32-bit sum.
///
/// # Safety
/// [`configure`] ran on this thread.
#[inline(always)]
pub(crate) unsafe fn dot<const C: u8, const A: u8, const B: u8, const SIGNED: bool>() {
    if SIGNED {
        asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
            options(nostack, preserves_flags, nomem));
    } else {
        asm!("tdpbsud tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
            options(nostack, preserves_flags, nomem));
    }
}

/// `tmm{C}`'s 16 rows of 64 bytes to `p`, 64 bytes apart.
///
/// # Safety
/// [`configure`] ran on this thread; `p` points at 1024 writable bytes.
#[inline(always)]
pub(crate) unsafe fn store<const C: u8>(p: *mut u8) {
    asm!("tilestored [{p} + {s}*1], tmm{c}", c = const C, p = in(reg) p, s = in(reg) 64usize,
        options(nostack, preserves_flags));
}
