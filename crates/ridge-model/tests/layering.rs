//! The crate's module layering, checked from its sources: `model.rs` on top, the table of
//! architectures (`arches.rs`) below it, the architecture files (`llama.rs`, `gemma3.rs`,
//! `qwen35.rs` with its `delta_net.rs`, `moe.rs`) below that, and the trait they implement (`stack.rs`) and the shared
//! layer steps (`layer.rs`) below them, with no import circle through any of them (issue #30: an architecture must be
//! readable and changeable without the model, and the shared steps without either).
//!
//! The check reads every `crate::…` path outside comments and `#[cfg(test)]` code, maps a
//! re-exported name (`crate::Workspace`) to the module that defines it through `lib.rs`'s
//! `pub use` lines, and looks for cycles in the module graph. Run with `--nocapture` to see the
//! graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The modules whose imports must run one way, top down.
const LAYERED: [&str; 9] = [
    "model",
    "arches",
    "llama",
    "gemma3",
    "qwen35",
    "delta_net",
    "moe",
    "stack",
    "layer",
];

/// `src` without comments, and without everything from the first `#[cfg(test)]` on (test
/// modules sit at the end of a file and may import anything).
fn code(src: &str) -> String {
    let end = src.find("#[cfg(test)]").unwrap_or(src.len());
    src[..end]
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segment of every path after `prefix` in `code`, a brace group's items each.
fn first_segments(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item) = (0usize, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(item.trim()).to_string());
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.push(ident(item.trim()).to_string());
        } else {
            out.push(ident(rest).to_string());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Module → the modules it imports, over `src/*.rs` (but `lib.rs`).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = fs::read_dir(src)
        .expect("src lists")
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .filter(|m| m != "lib")
        .collect();
    // Names `lib.rs` re-exports, with the module each comes from.
    let lib = code(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs reads"));
    let mut owner = BTreeMap::new();
    for m in &modules {
        for name in first_segments(&lib, &format!("pub use {m}::")) {
            owner.insert(name, m.clone());
        }
    }
    modules
        .iter()
        .map(|m| {
            let text = fs::read_to_string(src.join(format!("{m}.rs"))).expect("module reads");
            let deps = first_segments(&code(&text), "crate::")
                .into_iter()
                .filter_map(|s| {
                    if modules.contains(&s) {
                        Some(s)
                    } else {
                        owner.get(&s).cloned()
                    }
                })
                .filter(|d| d != m)
                .collect();
            (m.clone(), deps)
        })
        .collect()
}

/// Whether `to` is reachable from `from`.
fn reaches(g: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let (mut seen, mut todo) = (BTreeSet::new(), vec![from.to_string()]);
    while let Some(m) = todo.pop() {
        for d in g.get(&m).into_iter().flatten() {
            if d == to {
                return true;
            }
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    false
}

#[test]
fn model_architectures_and_layer_steps_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    for m in LAYERED {
        let deps: Vec<&str> = g[m].iter().map(String::as_str).collect();
        println!("{m}.rs -> {}", deps.join(", "));
    }
    // No module of the layered ones lies on a cycle, through any other module either.
    for m in LAYERED {
        assert!(
            !reaches(&g, m, m),
            "{m}.rs imports itself through {:?}",
            g[m]
        );
    }
    // The direction: model on top, the shared steps at the bottom.
    assert!(
        g["model"].contains("arches"),
        "model.rs does not use the table"
    );
    for arch in ["llama", "gemma3", "qwen35", "moe"] {
        assert!(!reaches(&g, arch, "model"), "{arch}.rs reaches model.rs");
        assert!(!reaches(&g, arch, "arches"), "{arch}.rs reaches arches.rs");
        assert!(
            reaches(&g, arch, "layer"),
            "{arch}.rs does not use layer.rs"
        );
    }
    for arch in ["llama", "gemma3", "qwen35"] {
        assert!(
            g["arches"].contains(arch),
            "arches.rs does not pick {arch}.rs"
        );
        assert!(
            g[arch].contains("stack"),
            "{arch}.rs does not implement stack.rs"
        );
    }
    for below in ["model", "arches", "llama", "gemma3", "qwen35", "moe"] {
        assert!(!reaches(&g, "layer", below), "layer.rs reaches {below}.rs");
        assert!(
            !reaches(&g, "stack", below) || below == "moe",
            "stack.rs reaches {below}.rs"
        );
    }
}

/// No module of the crate lies on an import cycle (the KV cache and its block pool included:
/// the pool owns the block size, the cache builds on the pool).
#[test]
fn no_module_imports_itself() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let cyclic: Vec<&String> = g.keys().filter(|m| reaches(&g, m, m)).collect();
    assert!(cyclic.is_empty(), "modules on an import cycle: {cyclic:?}");
    assert!(
        g["kv_cache"].contains("block_pool"),
        "the graph misses kv_cache -> block_pool"
    );
}
