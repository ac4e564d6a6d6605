//! The two roofs of a machine — memory read bandwidth and peak arithmetic rate — for the
//! accelerators people ask about, and for *this* machine as [`crate::probe`] measures it.
//!
//! The built-in figures are vendors' **dense** datasheet numbers (the "with sparsity" figures
//! are twice these and no decode step gets them). They are peaks: no kernel reaches them, so
//! every floor computed from them is a true lower bound on latency, never an estimate of it.
//! Keeping them in one table, with their sources, means a changed datasheet is a one-line fix
//! and every number ridge predicts can be traced back to a document.

use std::fmt;

use crate::probe;

/// The arithmetic precision whose peak bounds the compute side of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// 16-bit brain float tensor-core rate: what dequantized weights meet on a GPU.
    Bf16,
    /// 8-bit float tensor-core rate (where the hardware has one).
    Fp8,
    /// 8-bit integer multiply-adds: what ridge's quantized kernels run on a CPU (measured
    /// for `local` by the probe; not listed for the built-in GPUs).
    Int8,
}

impl Precision {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bf16" => Ok(Precision::Bf16),
            "fp8" => Ok(Precision::Fp8),
            "int8" => Ok(Precision::Int8),
            other => Err(format!(
                "unknown precision `{other}` (expected bf16, fp8 or int8)"
            )),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One machine's roofs.
#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    /// Short name (`h100-sxm`, `local`, …).
    pub name: String,
    /// A human-readable description for titles and tables.
    pub description: String,
    /// Memory read bandwidth, GB/s (10⁹ bytes per second).
    pub memory_bandwidth_gbs: f64,
    /// Peak dense bf16 rate, TFLOP/s (10¹² per second). For `local` this is the measured f32
    /// FMA peak: a CPU has no faster dense path for ridge's kernels.
    pub bf16_tflops: f64,
    /// Peak dense fp8 rate, TFLOP/s, where the hardware has one.
    pub fp8_tflops: Option<f64>,
    /// Peak int8 rate, TOP/s (a multiply-add counts 2), where known: for `local`, the
    /// probed rate of the path ridge's kernels take.
    pub int8_tops: Option<f64>,
    /// Where the numbers come from.
    pub source: String,
    /// The last-level cache and its read bandwidth, where measured (`local`): a step whose
    /// working set fits in it is bounded by that bandwidth instead.
    pub llc: Option<probe::CacheProbe>,
}

/// One row of the built-in table: name, description, GB/s, bf16 TFLOP/s, fp8 TFLOP/s, source.
type Row = (
    &'static str,
    &'static str,
    f64,
    f64,
    Option<f64>,
    &'static str,
);

/// The built-in table. Bandwidth in GB/s (10⁹ B/s), rates in dense TFLOP/s.
///
/// Sources (vendor datasheets, dense figures — the sparse ones are 2× and not used):
/// - H100 SXM5 80 GB: NVIDIA H100 Tensor Core GPU datasheet — 3.35 TB/s HBM3, BF16 989.5,
///   FP8 1979 TFLOPS dense.
/// - H200 SXM 141 GB: NVIDIA H200 Tensor Core GPU datasheet — 4.8 TB/s HBM3e; same Hopper
///   tensor cores as H100 SXM, so the same 989 / 1979 TFLOPS.
/// - A100 SXM 80 GB: NVIDIA A100 Tensor Core GPU datasheet — 2.039 TB/s HBM2e, BF16 312
///   TFLOPS dense; Ampere has no FP8 tensor cores.
/// - B200: NVIDIA DGX B200 / Blackwell datasheet, per GPU — 8 TB/s HBM3e, BF16 2.25 PFLOPS,
///   FP8 4.5 PFLOPS dense.
/// - MI300X: AMD Instinct MI300X datasheet — 5.3 TB/s HBM3, BF16 1307.4, FP8 2614.9 TFLOPS
///   dense.
const BUILTIN: &[Row] = &[
    (
        "h100-sxm",
        "NVIDIA H100 SXM",
        3350.0,
        989.0,
        Some(1979.0),
        "NVIDIA H100 datasheet (dense)",
    ),
    (
        "h200",
        "NVIDIA H200",
        4800.0,
        989.0,
        Some(1979.0),
        "NVIDIA H200 datasheet (dense)",
    ),
    (
        "a100-80gb",
        "NVIDIA A100 80GB",
        2039.0,
        312.0,
        None,
        "NVIDIA A100 datasheet (dense)",
    ),
    (
        "b200",
        "NVIDIA B200",
        8000.0,
        2250.0,
        Some(4500.0),
        "NVIDIA B200 datasheet (dense)",
    ),
    (
        "mi300x",
        "AMD MI300X",
        5300.0,
        1307.0,
        Some(2615.0),
        "AMD MI300X datasheet (dense)",
    ),
];

impl Hardware {
    /// Names of the built-in entries, in table order (`local` is not among them).
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|r| r.0).collect()
    }

    /// A built-in entry by name (case-insensitive), `None` if unknown.
    pub fn builtin(name: &str) -> Option<Hardware> {
        let name = name.to_ascii_lowercase();
        BUILTIN
            .iter()
            .find(|r| r.0 == name)
            .map(|&(n, d, gbs, bf16, fp8, src)| Hardware {
                llc: None,
                name: n.to_string(),
                description: d.to_string(),
                memory_bandwidth_gbs: gbs,
                bf16_tflops: bf16,
                fp8_tflops: fp8,
                int8_tops: None,
                source: src.to_string(),
            })
    }

    /// This machine as the probes measured it: `bandwidth_gbs` from [`probe::read_bandwidth`],
    /// `fma_gflops` (the all-threads f32 FMA peak) standing in for the bf16 rate; no fp8.
    pub fn local(bandwidth_gbs: f64, fma_gflops: f64, threads: usize) -> Hardware {
        Hardware {
            name: "local".to_string(),
            description: format!("this machine ({threads} threads)"),
            memory_bandwidth_gbs: bandwidth_gbs,
            bf16_tflops: fma_gflops / 1e3,
            fp8_tflops: None,
            int8_tops: None,
            source: "measured: ridge probe (quick bandwidth probe, f32 FMA peak)".to_string(),
            llc: None,
        }
    }

    /// Measures this machine: the quick bandwidth probe ([`probe::ProbeConfig::quick`]), the
    /// f32 FMA peak and the int8 multiply-add peak of ridge's path, about two seconds in all.
    pub fn probe_local(threads: usize) -> Hardware {
        let r = probe::run(&probe::ProbeConfig::quick(threads));
        let fma = probe::fma_gflops(threads, probe::FMA_ITERS, 3);
        let int8 = probe::int8_peak(ridge_kernels::Isa::detect(), threads, probe::PEAK_ITERS, 3);
        Hardware {
            llc: r.llc,
            int8_tops: int8.map(|p| 2.0 * p.gmacs / 1e3),
            source: format!(
                "measured: ridge probe (quick bandwidth probe, f32 FMA peak{})",
                int8.map_or(String::new(), |p| format!(", int8 {} peak", p.path))
            ),
            ..Hardware::local(r.read_bandwidth_gbs, fma, r.threads)
        }
    }

    /// Peak rate at `p`, TFLOP/s; `None` where the hardware has no such path.
    pub fn peak_tflops(&self, p: Precision) -> Option<f64> {
        match p {
            Precision::Bf16 => Some(self.bf16_tflops),
            Precision::Fp8 => self.fp8_tflops,
            Precision::Int8 => self.int8_tops,
        }
    }

    /// The ridge point at `p`, FLOP per byte: the arithmetic intensity above which a step is
    /// compute-bound, `peak FLOP/s / bandwidth`.
    pub fn ridge_point(&self, p: Precision) -> Option<f64> {
        self.peak_tflops(p)
            .map(|t| t * 1e12 / (self.memory_bandwidth_gbs * 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_has_the_datasheet_numbers() {
        let h = Hardware::builtin("H100-SXM").unwrap();
        assert_eq!(h.memory_bandwidth_gbs, 3350.0);
        assert_eq!(h.peak_tflops(Precision::Bf16), Some(989.0));
        assert_eq!(h.peak_tflops(Precision::Fp8), Some(1979.0));
        let a = Hardware::builtin("a100-80gb").unwrap();
        assert_eq!(a.memory_bandwidth_gbs, 2039.0);
        assert_eq!(a.peak_tflops(Precision::Fp8), None);
        let b = Hardware::builtin("b200").unwrap();
        assert_eq!((b.memory_bandwidth_gbs, b.bf16_tflops), (8000.0, 2250.0));
        let m = Hardware::builtin("mi300x").unwrap();
        assert_eq!(
            (m.memory_bandwidth_gbs, m.fp8_tflops),
            (5300.0, Some(2615.0))
        );
        assert_eq!(
            Hardware::builtin("h200").unwrap().memory_bandwidth_gbs,
            4800.0
        );
        assert!(Hardware::builtin("tpu").is_none());
        assert_eq!(Hardware::builtin_names().len(), 5);
    }

    #[test]
    fn ridge_point_is_peak_over_bandwidth() {
        // H100 bf16: 989e12 / 3.35e12 = 295.22… FLOP/byte.
        let h = Hardware::builtin("h100-sxm").unwrap();
        let r = h.ridge_point(Precision::Bf16).unwrap();
        assert!((r - 295.223_880_597).abs() < 1e-6, "{r}");
        // Local: 200 GFLOP/s over 20 GB/s = 10 FLOP/byte.
        let l = Hardware::local(20.0, 200.0, 2);
        assert!(l.llc.is_none());
        assert!((l.ridge_point(Precision::Bf16).unwrap() - 10.0).abs() < 1e-12);
        assert_eq!(l.ridge_point(Precision::Fp8), None);
    }

    #[test]
    fn precision_parses() {
        assert_eq!("fp8".parse::<Precision>(), Ok(Precision::Fp8));
        assert_eq!("int8".parse::<Precision>(), Ok(Precision::Int8));
        assert_eq!(
            Hardware::builtin("h100-sxm")
                .unwrap()
                .peak_tflops(Precision::Int8),
            None
        );
        assert!("int4".parse::<Precision>().is_err());
    }
}
