//! Parsing a model name that points into the Hugging Face Hub.
//!
//! People copy these names from ollama's and llama.cpp's docs, so every spelling they use is
//! accepted: `hf.co/OWNER/REPO[:QUANT]`, `huggingface.co/OWNER/REPO[:QUANT]`, `hf://OWNER/REPO`,
//! bare `OWNER/REPO:QUANT`, and a file inside the repository instead of a tag
//! (`hf.co/OWNER/REPO/sub/dir/file.gguf`). `@REVISION` after the repository picks a branch, tag
//! or commit (default `main`). A bare `OWNER/REPO` without a tag counts as a Hub name only when
//! no such local path exists; the caller checks paths first.

/// A parsed Hub model name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRef {
    /// `OWNER/REPO`.
    pub repo: String,
    /// Branch, tag or commit (default `main`).
    pub revision: String,
    /// What picks the GGUF: a quantisation tag, or a path inside the repository.
    pub pick: Pick,
}

/// How the GGUF inside a repository is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The default: `Q4_K_M` if present, else the only GGUF.
    Default,
    /// A quantisation tag, matched case-insensitively against the file names.
    Quant(String),
    /// A file path inside the repository.
    File(String),
}

impl std::fmt::Display for HubRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hf.co/{}", self.repo)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        match &self.pick {
            Pick::Default => Ok(()),
            Pick::Quant(q) => write!(f, ":{q}"),
            Pick::File(p) => write!(f, "/{p}"),
        }
    }
}

const PREFIXES: [&str; 5] = [
    "hf.co/",
    "huggingface.co/",
    "https://huggingface.co/",
    "https://hf.co/",
    "hf://",
];

/// Parses `arg` as a Hub name; `None` when it does not look like one (a registry name, a
/// path). `Err` when it clearly means the Hub but is malformed.
pub fn parse(arg: &str) -> Option<Result<HubRef, String>> {
    let (rest, explicit) = match PREFIXES.iter().find_map(|p| arg.strip_prefix(p)) {
        Some(r) => (r, true),
        None => (arg, false),
    };
    if !explicit {
        // Bare `OWNER/REPO[:QUANT]`: exactly one slash, no path-like pieces.
        if arg.starts_with(['/', '.', '~'])
            || arg.matches('/').count() != 1
            || arg.to_ascii_lowercase().ends_with(".gguf")
        {
            return None;
        }
    }
    Some(parse_rest(rest).map_err(|e| format!("`{arg}` is not a Hub model name: {e}")))
}

fn parse_rest(rest: &str) -> Result<HubRef, String> {
    // `/resolve/main/file.gguf` and `/blob/main/...` as copied from a browser.
    let mut parts: Vec<&str> = rest.split('/').collect();
    if parts.len() < 2 || parts[0].is_empty() || parts[1].is_empty() {
        return Err("expected OWNER/REPO".into());
    }
    let owner = parts.remove(0);
    let mut repo_part = parts.remove(0).to_string();
    let mut revision = None;
    if parts.len() >= 2 && (parts[0] == "resolve" || parts[0] == "blob" || parts[0] == "tree") {
        parts.remove(0);
        revision = Some(parts.remove(0).to_string());
    }
    let mut pick = Pick::Default;
    if parts.is_empty() {
        if let Some((r, q)) = repo_part.clone().split_once(':') {
            repo_part = r.to_string();
            pick = tag_or_file(q)?;
        }
    } else {
        let file = parts.join("/");
        if file.split('/').any(|s| s.is_empty() || s == "..") {
            return Err(format!("bad file path `{file}`"));
        }
        pick = Pick::File(file);
    }
    if let Some((r, rev)) = repo_part.clone().split_once('@') {
        repo_part = r.to_string();
        revision = Some(rev.to_string());
    }
    for name in [owner, repo_part.as_str()] {
        if name.is_empty()
            || name == "."
            || name == ".."
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!("bad repository name part `{name}`"));
        }
    }
    let revision = revision.unwrap_or_else(|| "main".to_string());
    if revision.is_empty() || revision.contains("..") || revision.starts_with('/') {
        return Err(format!("bad revision `{revision}`"));
    }
    Ok(HubRef {
        repo: format!("{owner}/{repo_part}"),
        revision,
        pick,
    })
}

fn tag_or_file(q: &str) -> Result<Pick, String> {
    if q.is_empty() {
        return Err("empty tag after `:`".into());
    }
    if q.to_ascii_lowercase().ends_with(".gguf") {
        if q.split('/').any(|s| s.is_empty() || s == "..") {
            return Err(format!("bad file path `{q}`"));
        }
        return Ok(Pick::File(q.to_string()));
    }
    Ok(Pick::Quant(q.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> HubRef {
        parse(s).expect("hub name").expect("valid")
    }

    #[test]
    fn every_spelling_parses_to_the_same_reference() {
        let want = HubRef {
            repo: "bartowski/Qwen2.5-7B-Instruct-GGUF".into(),
            revision: "main".into(),
            pick: Pick::Quant("Q4_K_M".into()),
        };
        for s in [
            "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
            "huggingface.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
            "hf://bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
            "bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
        ] {
            assert_eq!(ok(s), want, "{s}");
        }
        assert_eq!(ok("hf.co/a/b").pick, Pick::Default);
        assert_eq!(ok("a/b").pick, Pick::Default);
    }

    #[test]
    fn files_and_revisions() {
        let r = ok("hf.co/o/r/Q4_K_M/m-00001-of-00002.gguf");
        assert_eq!(r.pick, Pick::File("Q4_K_M/m-00001-of-00002.gguf".into()));
        let r = ok("hf.co/o/r@v1.0:q8_0");
        assert_eq!(
            (r.revision.as_str(), r.pick),
            ("v1.0", Pick::Quant("q8_0".into()))
        );
        let r = ok("https://huggingface.co/o/r/resolve/abc123/x.gguf");
        assert_eq!(r.revision, "abc123");
        assert_eq!(r.pick, Pick::File("x.gguf".into()));
        assert_eq!(ok("o/r:x.gguf").pick, Pick::File("x.gguf".into()));
        assert_eq!(ok("hf.co/o/r:Q4_0").to_string(), "hf.co/o/r:Q4_0");
    }

    #[test]
    fn paths_and_registry_names_are_not_hub_names() {
        for s in [
            "smollm2-135m",
            "model.gguf",
            "dir/model.gguf",
            "./a/b",
            "/abs/a",
            "a/b/c",
            "~/x/y",
        ] {
            assert!(parse(s).is_none(), "{s}");
        }
    }

    #[test]
    fn malformed_hub_names_say_why() {
        for s in [
            "hf.co/onlyowner",
            "hf.co/o/r:",
            "hf.co/o/r/../x.gguf",
            "hf.co/o$/r",
        ] {
            let e = parse(s).expect("hub").expect_err(s);
            assert!(e.contains(s), "{e}");
        }
    }
}
