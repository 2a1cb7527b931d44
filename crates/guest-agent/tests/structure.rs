//! The agent's source stays proofreadable: no file imports itself back through others (the
//! `use crate::…` / `super::…` graph between files is acyclic) and no file is over
//! [`MAX_LINES`] lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines.
const MAX_LINES: usize = 500;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file below `dir`, as paths relative to `src/`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.strip_prefix(src()).expect("below src").to_path_buf());
        }
    }
}

/// The module path of a file: `files/watch/mod.rs` → `[files, watch]`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file of the longest prefix of `path` that is a module.
fn file_of(path: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

/// Module paths named in `text` (outside comments and tests) from the file's module `here`.
fn references(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for key in ["crate::", "super::"] {
            for (i, _) in line.match_indices(key) {
                if i > 0 && line.as_bytes()[i - 1].is_ascii_alphanumeric() {
                    continue;
                }
                out.extend(paths_at(&line[i..], here));
            }
        }
    }
    out
}

fn ident(s: &str) -> &str {
    let n = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..n]
}

/// The module paths of `crate::a::b`, `super::x`, `crate::{a, b::c}` at the start of `s`.
fn paths_at(s: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut base: Vec<String> = here.to_vec();
    let mut rest = s;
    loop {
        let id = ident(rest);
        match id {
            "crate" => base.clear(),
            "super" => {
                base.pop();
            }
            "" => break,
            _ => base.push(id.to_string()),
        }
        rest = &rest[id.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![base],
        }
    }
    // A group: `{a, b::c}` on this line.
    let Some(group) = rest.strip_prefix('{') else {
        return vec![base];
    };
    let inner = group.split('}').next().unwrap_or("");
    inner
        .split(',')
        .map(|item| {
            let mut p = base.clone();
            p.extend(
                item.trim()
                    .split("::")
                    .map(ident)
                    .filter(|i| !i.is_empty() && *i != "self")
                    .map(str::to_string),
            );
            p
        })
        .collect()
}

#[test]
fn files_do_not_import_each_other_in_a_cycle() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let modules: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &all {
        if f == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(src().join(f)).expect("read");
        let here = module_of(f);
        let edges = graph.entry(f.clone()).or_default();
        for r in references(&text, &here) {
            if let Some(target) = file_of(&r, &modules) {
                // A file naming its own module, or a parent module file naming its children's
                // contents, is no edge of its own: only imports between files count.
                if &target != f && target != Path::new("lib.rs") {
                    edges.insert(target);
                }
            }
        }
    }
    // Depth-first search for a cycle.
    fn visit(
        node: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut state, &mut Vec::new()) {
            let shown: Vec<String> = cycle.iter().map(|p| p.display().to_string()).collect();
            panic!("import cycle: {}", shown.join(" → "));
        }
    }
}

#[test]
fn files_stay_proofreadable() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let long: Vec<String> = all
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(src().join(f)).ok()?.lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}
