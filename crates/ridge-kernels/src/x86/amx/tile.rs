//! The AMX tile registers: asking the kernel for them, the one tile configuration ridge uses,
//! and the handful of tile instructions the products need, each a one-line `asm!` (the
//! intrinsics are not stable Rust; the instructions assemble everywhere and run only behind a
//! [`crate::Isa`] whose detection found AMX and got the kernel's permission).
//!
//! # The configurations
//! `tmm0`, `tmm1`: 16 × 16 i32 results (16 tokens × 16 weight rows); `tmm6`, `tmm7` the same
//! shape, unused by the products.
//! `tmm2`/`tmm3` and `tmm4`/`tmm5`: two pairs of operands of one sub-block — activations 16
//! rows × `K` bytes, weights `K / 4` rows × 64 bytes (each row four consecutive quants of 16
//! weight rows), `K` 32 or 16 (Q6_K) as the configuration says. The tile registers are not
//! renamed, so the products alternate between them (see `x86::amx`'s loop): a load into
//! operands that the previous product still reads, or a store of a result the unit is still
//! computing, would wait for it.

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

/// A 64-byte tile configuration (palette 1), as `ldtilecfg` reads it.
#[repr(C, align(64))]
struct Config([u8; 64]);

/// The configuration for `K`-byte sub-blocks described in the module docs.
const fn config(k: u16) -> Config {
    let mut c = [0u8; 64];
    c[0] = 1;
    // (rows, bytes per row) of tmm0..tmm7.
    let shapes: [(u8, u16); 8] = [
        (16, 64),
        (16, 64),
        (16, k),
        ((k / 4) as u8, 64),
        (16, k),
        ((k / 4) as u8, 64),
        (16, 64),
        (16, 64),
    ];
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

static CONFIG32: Config = config(32);
static CONFIG16: Config = config(16);

/// Loads the configuration for `k`-byte sub-blocks (32, or 16) into this thread's tile
/// registers (zeroing them).
///
/// # Safety
/// [`permitted`] returned true (the CPU has AMX and the kernel granted the tile state).
#[inline(always)]
pub(crate) unsafe fn configure(k: usize) {
    let c = if k == 16 { &CONFIG16 } else { &CONFIG32 };
    asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, preserves_flags));
}

/// Returns the tile registers to their initial state (so a context switch saves none).
///
/// # Safety
/// As [`configure`].
#[inline(always)]
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, preserves_flags));
}

/// `tmm{A}` ← its configured rows of its configured width from `p`, `stride` bytes apart.
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

/// The probe's configuration: every tile at its largest shape (16 rows × 64 bytes).
static CONFIG_PEAK: Config = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    Config(c)
};

/// Multiply-adds of one [`peak_loop`] iteration: four 16 × 16 × 64 tile products.
pub(crate) const PEAK_MACS_PER_ITER: u64 = 4 * 16 * 16 * 64;

/// The tile unit's peak: `iters` iterations of four full-size products (two activation tiles
/// of ones, two weight tiles of −1, `tdpbssd`, or `tdpbf16ps` on the same shapes with `BF16`:
/// 1.0 · −1.0 pairs), into four independent accumulators or, with `CHAINED`, all four into one
/// (on the Xeon measured in session 26, one accumulator ran about twice as fast as four).
/// Returns result element (0, 0) of the first accumulator as an `i32` (for bf16, the f32's
/// value truncated): `−64 · iters` for int8 and `−32 · iters` for bf16, four times that when
/// chained, so the work cannot be skipped.
///
/// # Safety
/// [`permitted`] returned true; with `BF16` the CPU also reports AMX-BF16.
#[inline(never)]
pub(crate) unsafe fn peak_loop<const BF16: bool, const CHAINED: bool>(iters: u64) -> i32 {
    #[repr(C, align(64))]
    struct Tiles([u8; 1024], [u8; 1024], [u8; 1024]);
    // bf16 1.0 = 0x3F80, −1.0 = 0xBF80 (little-endian pairs).
    let mut m = if BF16 {
        let mut t = Tiles([0; 1024], [0; 1024], [0; 1024]);
        for i in (0..1024).step_by(2) {
            (t.0[i], t.0[i + 1]) = (0x80, 0x3F);
            (t.1[i], t.1[i + 1]) = (0x80, 0xBF);
        }
        t
    } else {
        Tiles([1; 1024], [0xFF; 1024], [0; 1024])
    };
    asm!("ldtilecfg [{}]", in(reg) CONFIG_PEAK.0.as_ptr(), options(nostack, preserves_flags));
    load::<4>(m.0.as_ptr(), 64);
    load::<5>(m.0.as_ptr(), 64);
    load::<6>(m.1.as_ptr(), 64);
    load::<7>(m.1.as_ptr(), 64);
    zero::<0>();
    zero::<1>();
    zero::<2>();
    zero::<3>();
    for _ in 0..iters {
        match (BF16, CHAINED) {
            (true, false) => asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                options(nostack, preserves_flags, nomem)
            ),
            (true, true) => asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm0, tmm4, tmm7",
                "tdpbf16ps tmm0, tmm5, tmm6",
                "tdpbf16ps tmm0, tmm5, tmm7",
                options(nostack, preserves_flags, nomem)
            ),
            (false, false) => {
                dot::<0, 4, 6, true>();
                dot::<1, 4, 7, true>();
                dot::<2, 5, 6, true>();
                dot::<3, 5, 7, true>();
            }
            (false, true) => {
                dot::<0, 4, 6, true>();
                dot::<0, 4, 7, true>();
                dot::<0, 5, 6, true>();
                dot::<0, 5, 7, true>();
            }
        }
    }
    store::<0>(m.2.as_mut_ptr());
    release();
    let first = [m.2[0], m.2[1], m.2[2], m.2[3]];
    if BF16 {
        f32::from_le_bytes(first) as i32
    } else {
        i32::from_le_bytes(first)
    }
}

/// Whether the CPU reports AMX-BF16 (CPUID leaf 7, EDX bit 22).
pub(crate) fn has_bf16() -> bool {
    std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << 22) != 0
}
