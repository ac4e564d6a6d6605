//! Choosing the GGUF inside a Hub repository from a quantisation tag.
//!
//! A GGUF repository holds one file per quantisation (`Model-Q4_K_M.gguf`, `Model-Q8_0.gguf`,
//! sometimes a folder per quantisation with split shards), plus files that are not the model
//! (`mmproj-*.gguf` vision projectors, READMEs, images). A tag matches a file when it appears in
//! the file's path as a whole piece — bounded by the path's start or end, `-`, `.` or `/` — so
//! `Q4_K` does not pick `Q4_K_M` and `Q4_0` does not pick `IQ4_0`. Split shards
//! (`-00001-of-00003.gguf`) count as one model.

/// One model in a repository: a single GGUF, or every shard of a split one in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Paths inside the repository, first shard first.
    pub files: Vec<String>,
}

impl Candidate {
    /// The path the model is opened by (its first shard).
    pub fn first(&self) -> &str {
        &self.files[0]
    }

    /// The quantisation tag its name shows, if any (for listing the choices).
    pub fn tag(&self) -> Option<String> {
        let name = strip_shard(self.first());
        let name = name.strip_suffix(".gguf").unwrap_or(&name).to_string();
        name.split(['-', '.', '/'])
            .rev()
            .find(|p| looks_like_tag(p))
            .map(str::to_ascii_uppercase)
    }
}

fn looks_like_tag(p: &str) -> bool {
    let u = p.to_ascii_uppercase();
    let quant = |s: &str| {
        s.strip_prefix('Q')
            .or_else(|| s.strip_prefix("IQ"))
            .is_some_and(|r| {
                r.starts_with(|c: char| c.is_ascii_digit())
                    && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
    };
    quant(&u)
        || matches!(u.as_str(), "F16" | "F32" | "BF16")
        || u.starts_with("MXFP4")
        || u.starts_with("TQ1")
        || u.starts_with("TQ2")
}

/// `(prefix, index, count)` when `path` is a shard `PREFIX-0000I-of-0000N.gguf` (the name
/// rule is the GGUF reader's own, so what a pull fetches is what the loader opens).
pub fn shard_of(path: &str) -> Option<(&str, u32, u32)> {
    ridge_gguf::parse_shard_name(path)
}

fn strip_shard(path: &str) -> String {
    match shard_of(path) {
        Some((prefix, _, _)) => format!("{prefix}.gguf"),
        None => path.to_string(),
    }
}

/// Groups a repository's files into models: GGUFs other than projectors, shards joined.
/// Incomplete shard sets are left out (they cannot be opened).
pub fn candidates<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Candidate> {
    let mut singles = Vec::new();
    let mut groups: std::collections::BTreeMap<(String, u32), Vec<(u32, String)>> =
        Default::default();
    for p in paths {
        let base = p.rsplit('/').next().unwrap_or(p).to_ascii_lowercase();
        if !base.ends_with(".gguf") || base.starts_with("mmproj") {
            continue;
        }
        match shard_of(p) {
            Some((prefix, i, n)) if n > 1 => groups
                .entry((prefix.to_string(), n))
                .or_default()
                .push((i, p.to_string())),
            _ => singles.push(Candidate {
                files: vec![p.to_string()],
            }),
        }
    }
    for ((_, n), mut shards) in groups {
        shards.sort();
        shards.dedup_by_key(|s| s.0);
        if shards.len() == n as usize && shards.iter().zip(1..).all(|(s, i)| s.0 == i) {
            singles.push(Candidate {
                files: shards.into_iter().map(|s| s.1).collect(),
            });
        }
    }
    singles.sort_by(|a, b| a.first().cmp(b.first()));
    singles
}

/// Split sets among `paths` that lack shards: `(a shard present, shard count, missing numbers)`.
pub fn incomplete_sets<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, u32, Vec<u32>)> {
    let mut groups: std::collections::BTreeMap<(String, u32), Vec<(u32, String)>> =
        Default::default();
    for p in paths {
        if let Some((prefix, i, n)) = shard_of(p).filter(|s| s.2 > 1) {
            groups
                .entry((prefix.to_string(), n))
                .or_default()
                .push((i, p.to_string()));
        }
    }
    groups
        .into_iter()
        .filter_map(|((_, n), mut shards)| {
            shards.sort();
            let missing: Vec<u32> = (1..=n)
                .filter(|i| !shards.iter().any(|s| s.0 == *i))
                .collect();
            (!missing.is_empty()).then(|| (shards[0].1.clone(), n, missing))
        })
        .collect()
}

/// True when `tag` appears in `path` as a whole piece (case-insensitive).
pub fn has_tag(path: &str, tag: &str) -> bool {
    let (p, t) = (path.to_ascii_lowercase(), tag.to_ascii_lowercase());
    let boundary = |c: Option<char>| c.is_none_or(|c| matches!(c, '-' | '.' | '/'));
    p.match_indices(&t).any(|(i, _)| {
        boundary(p[..i].chars().next_back()) && boundary(p[i + t.len()..].chars().next())
    })
}

/// The tag used when none is given.
pub const DEFAULT_TAG: &str = "Q4_K_M";

/// Picks the model for `tag` (`None`: the default), or says why none or several match and
/// lists the choices.
pub fn choose(cands: &[Candidate], tag: Option<&str>) -> Result<Candidate, String> {
    if cands.is_empty() {
        return Err("the repository holds no GGUF model file".into());
    }
    let by_tag =
        |t: &str| -> Vec<&Candidate> { cands.iter().filter(|c| has_tag(c.first(), t)).collect() };
    let found = match tag {
        Some(t) => by_tag(t),
        None if cands.len() == 1 => vec![&cands[0]],
        None => by_tag(DEFAULT_TAG),
    };
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "{}; choose one of: {}",
            match tag {
                Some(t) => format!("no GGUF matches the tag `{t}`"),
                None => format!("no tag given and no {DEFAULT_TAG} file"),
            },
            list(cands.iter())
        )),
        several => Err(format!(
            "the tag `{}` matches {} files; name one as OWNER/REPO:FILE.gguf: {}",
            tag.unwrap_or(DEFAULT_TAG),
            several.len(),
            list(several.iter().copied())
        )),
    }
}

fn list<'a>(cands: impl Iterator<Item = &'a Candidate>) -> String {
    cands
        .map(|c| match c.tag() {
            Some(t) => format!("{t} ({})", c.first()),
            None => c.first().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: [&str; 9] = [
        "README.md",
        "Model-Q4_K_M.gguf",
        "Model-Q4_K_S.gguf",
        "Model-IQ4_XS.gguf",
        "Model-q8_0.gguf",
        "mmproj-Model-f16.gguf",
        "BF16/Model-BF16-00001-of-00002.gguf",
        "BF16/Model-BF16-00002-of-00002.gguf",
        "Q2_K/Model-Q2_K-00001-of-00002.gguf",
    ];

    #[test]
    fn tags_pick_whole_pieces_only() {
        let c = candidates(REPO);
        // The incomplete Q2_K set and the projector are not models.
        assert_eq!(c.len(), 5, "{c:?}");
        let pick = |t: Option<&str>| choose(&c, t).map(|c| c.files);
        assert_eq!(pick(None).unwrap(), ["Model-Q4_K_M.gguf"]);
        assert_eq!(pick(Some("q4_k_s")).unwrap(), ["Model-Q4_K_S.gguf"]);
        assert_eq!(pick(Some("Q8_0")).unwrap(), ["Model-q8_0.gguf"]);
        assert_eq!(
            pick(Some("bf16")).unwrap(),
            [
                "BF16/Model-BF16-00001-of-00002.gguf",
                "BF16/Model-BF16-00002-of-00002.gguf"
            ]
        );
        let e = pick(Some("Q4_K")).unwrap_err();
        assert!(e.contains("no GGUF matches the tag `Q4_K`"), "{e}");
        for t in ["Q4_K_M", "Q4_K_S", "IQ4_XS", "Q8_0", "BF16"] {
            assert!(e.contains(t), "{e} lacks {t}");
        }
        assert!(!e.contains("mmproj"), "{e}");
    }

    #[test]
    fn default_is_the_only_model_or_q4_k_m() {
        let c = candidates(["x/Only-Q6_K.gguf", "notes.txt"]);
        assert_eq!(choose(&c, None).unwrap().files, ["x/Only-Q6_K.gguf"]);
        let c = candidates(["A-Q6_K.gguf", "A-Q8_0.gguf"]);
        let e = choose(&c, None).unwrap_err();
        assert!(
            e.contains("no tag given") && e.contains("Q6_K") && e.contains("Q8_0"),
            "{e}"
        );
        let c = candidates(["A-Q4_K_M.gguf", "A-Q4_K_M-imat.gguf"]);
        let e = choose(&c, None).unwrap_err();
        assert!(e.contains("matches 2 files"), "{e}");
        assert!(choose(&[], None).unwrap_err().contains("no GGUF"));
        let gaps = incomplete_sets(["a/m-00001-of-00003.gguf", "a/m-00003-of-00003.gguf"]);
        assert_eq!(gaps, [("a/m-00001-of-00003.gguf".to_string(), 3, vec![2])]);
    }

    #[test]
    fn shards_are_recognised() {
        assert_eq!(shard_of("a/m-00002-of-00003.gguf"), Some(("a/m", 2, 3)));
        assert_eq!(shard_of("m-2-of-3.gguf"), None);
        assert_eq!(shard_of("m.gguf"), None);
        assert_eq!(
            candidates(["m-00001-of-00001.gguf"])[0].files,
            ["m-00001-of-00001.gguf"]
        );
    }
}
