//! The server's modules depend on each other in one direction — routes → protocol adapters →
//! the neutral request (params, tools, structured, reasoning) → session → engine, with
//! errors, the request log and metrics below them all — and this test fails on any import
//! circle between them (issue #53: an 8-module circle had grown here). It reads the sources:
//! every `crate::module` a file names outside comments and its test module is an edge from
//! the file's top-level module to that one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let node = first.trim_end_matches(".rs").to_string();
        if node == "lib" || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let uses = g.entry(node.clone()).or_default();
        for line in code.lines() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for (i, _) in l.match_indices("crate::") {
                let rest = &l[i + "crate::".len()..];
                let m: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !m.is_empty() && m != node {
                    uses.insert(m);
                }
            }
        }
    }
    g
}

/// A cycle through `start`, if any (the path, `start` first and last).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, m, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(g, n, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_server_modules_have_no_import_circle() {
    let g = graph();
    assert!(g.len() > 15, "read the sources: {g:?}");
    if let Some(c) = cycle(&g) {
        panic!(
            "an import circle between the server's modules: {}",
            c.join(" → ")
        );
    }
    // The direction named in the module docs.
    let uses = |a: &str, b: &str| g.get(a).is_some_and(|s| s.contains(b));
    assert!(uses("handlers", "protocols") && uses("protocols", "session"));
    for (low, high) in [
        ("session", "protocols"),
        ("protocols", "handlers"),
        ("state", "pool"),
        ("error", "session"),
        ("metrics", "state"),
        ("reasoning", "tools"),
    ] {
        assert!(!uses(low, high), "{low} must not use {high}");
    }
}

#[test]
fn a_circle_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().insert(b.into());
    }
    let c = cycle(&g).unwrap();
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4);
    g.get_mut("c").unwrap().remove("a");
    assert_eq!(cycle(&g), None);
}
