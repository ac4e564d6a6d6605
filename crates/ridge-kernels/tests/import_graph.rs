//! The kernel files import each other in layers, never in a circle (the crate docs name the
//! layers): each file's `crate::…` / `super::…` / child paths outside its test module are
//! resolved to the file they name, and the graph must have no cycle. A circle is how the
//! flat layout decayed before (AVX2, VNNI and 512-bit tile files importing each other), so
//! this test keeps a new instruction set's folder from quietly closing one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as paths relative to `root`.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(root).expect("under root").to_path_buf());
        }
    }
}

/// The source without comments and without its test module (which sits at the end of a file).
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths written after a `prefix::` at `s`: `a::b::C`, or every item of a `{…}` group.
fn paths_at(s: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    let mut path = base;
    loop {
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                while b
                    .get(i)
                    .is_some_and(|c| c.is_ascii_whitespace() || *c == b',')
                {
                    i += 1;
                }
                if b.get(i) == Some(&b'}') || i >= b.len() {
                    return i + 1;
                }
                i += paths_at(&s[i..], path.clone(), out);
            }
        }
        let start = i;
        while b
            .get(i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            i += 1;
        }
        if i > start {
            path.push(s[start..i].to_string());
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(path);
        return i;
    }
}

/// The module path of a file (`x86/avx2/dot.rs` → `x86::avx2::dot`, `act/mod.rs` → `act`).
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The file that the longest module prefix of `path` names, if any.
fn file_of(files: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<PathBuf> {
    (1..=path.len())
        .rev()
        .find_map(|k| files.get(&path[..k]).cloned())
}

/// A cycle of the graph, if it has one.
fn find_cycle(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    fn visit(
        n: &PathBuf,
        edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|s| s == n).unwrap_or(0);
                let mut cycle = stack[from..].to_vec();
                cycle.push(n.clone());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The import graph of the crate's source files (lib.rs's re-exports followed to the file
/// they come from; lib.rs itself, which declares every module, is not a node).
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut list = Vec::new();
    rust_files(src, src, &mut list);
    let files: BTreeMap<Vec<String>, PathBuf> =
        list.iter().map(|f| (module_of(f), f.clone())).collect();
    // Names lib.rs re-exports (`pub use cpu::{Isa, IsaKind}`): name → the module path.
    let lib = code(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for stmt in lib.split("pub use ").skip(1) {
        let mut paths = Vec::new();
        paths_at(stmt, Vec::new(), &mut paths);
        for p in paths {
            if let Some(name) = p.last() {
                reexports.insert(name.clone(), p.clone());
            }
        }
        if let Some((path, alias)) = stmt.split(';').next().and_then(|s| s.split_once(" as ")) {
            let p: Vec<String> = path.trim().split("::").map(str::to_string).collect();
            reexports.insert(alias.trim().to_string(), p);
        }
    }
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in list.iter().filter(|f| f.as_os_str() != "lib.rs") {
        let text = code(&std::fs::read_to_string(src.join(f)).expect("source"));
        let me = module_of(f);
        let mut paths = Vec::new();
        for (prefix, base) in [
            ("crate::", Vec::new()),
            ("super::", me[..me.len().saturating_sub(1)].to_vec()),
            ("self::", me.clone()),
        ] {
            for (i, _) in text.match_indices(prefix) {
                let before = text[..i].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue; // `$crate::` is `crate::`; `xcrate::` is not a path
                }
                paths_at(&text[i + prefix.len()..], base.clone(), &mut paths);
            }
        }
        // `use child::…` in a module file: a path relative to the module itself.
        for stmt in text.split("use ").skip(1) {
            let first: String = stmt
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let mut child = me.clone();
            child.push(first);
            if files.contains_key(&child) {
                paths_at(stmt, me.clone(), &mut paths);
            }
        }
        for p in paths {
            let target = match file_of(&files, &p) {
                Some(t) => Some(t),
                None => p
                    .first()
                    .and_then(|n| reexports.get(n))
                    .and_then(|r| file_of(&files, r)),
            };
            if let Some(t) = target.filter(|t| t != f && t.as_os_str() != "lib.rs") {
                edges.entry(f.clone()).or_default().insert(t);
            }
        }
        edges.entry(f.clone()).or_default();
    }
    edges
}

#[test]
fn the_kernel_files_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    let edge = |a: &str, b: &str| {
        edges
            .get(Path::new(a))
            .is_some_and(|s| s.contains(Path::new(b)))
    };
    // The parser sees what is there: a few edges that must exist, in each kind of path.
    assert!(
        edge("x86/avx512/tiles_zmm.rs", "x86/avx512/tiles.rs"),
        "super:: path"
    );
    assert!(edge("x86/avx2/tiles.rs", "tiles.rs"), "braced crate:: path");
    assert!(edge("act/mod.rs", "act/blocks.rs"), "child path");
    assert!(edge("ops.rs", "cpu.rs"), "re-exported name (crate::Isa)");
    assert!(edge("cpu.rs", "dispatch.rs"));
    let n: usize = edges.values().map(BTreeSet::len).sum();
    assert!(n > 60, "only {n} edges found: the parser is missing paths");
    if let Some(cycle) = find_cycle(&edges) {
        let names: Vec<String> = cycle.iter().map(|p| p.display().to_string()).collect();
        panic!("import circle: {}", names.join(" → "));
    }
}

#[test]
fn a_circle_is_found_when_there_is_one() {
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    let p = |s: &str| PathBuf::from(s);
    edges.entry(p("a.rs")).or_default().insert(p("b.rs"));
    edges.entry(p("b.rs")).or_default().insert(p("c.rs"));
    assert_eq!(find_cycle(&edges), None);
    edges.entry(p("c.rs")).or_default().insert(p("a.rs"));
    assert_eq!(
        find_cycle(&edges),
        Some(vec![p("a.rs"), p("b.rs"), p("c.rs"), p("a.rs")])
    );
}
