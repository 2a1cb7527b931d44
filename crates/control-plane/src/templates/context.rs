//! The build context of a template file, as the control plane sees it (a tar archive in
//! memory; nothing here touches a file system): `.dockerignore` applied (the entries it
//! excludes are left out of the archive the node unpacks), `COPY` wildcards expanded against
//! the entries' names, and `COPY` sources checked to exist.
//!
//! Patterns follow Docker's `.dockerignore` (moby's `patternmatcher`): one per line, `#`
//! comments, a leading `/` and `./` ignored, `*` and `?` within one path component, `[…]`
//! classes, `**` across components, `!` re-including what an earlier pattern excluded; a
//! pattern that matches a directory excludes what is below it. Every loop here is bounded:
//! the ignore file's size and pattern count, the entries of the archive, and a time limit.

use std::io::Read;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cove_domain::InvalidInput;
use cove_node_api::{BuildStep, FileStep};
use regex::Regex;

use super::file::is_pattern;
use crate::ServiceError;

/// The ignore file, at the context's root.
pub const IGNORE_FILE: &str = ".dockerignore";
/// Longest `.dockerignore`, in bytes.
const MAX_IGNORE_BYTES: u64 = 64 * 1024;
/// Most patterns of a `.dockerignore`.
const MAX_PATTERNS: usize = 512;
/// Most entries of a context that the control plane reads (the node bounds what it unpacks).
const MAX_ENTRIES: usize = 200_000;
/// Longest time spent filtering or matching one context.
const MAX_TIME: Duration = Duration::from_secs(20);
/// Most paths one `COPY` wildcard expands to.
const MAX_MATCHES: usize = 10_000;

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    InvalidInput::new(field, message).into()
}

/// One `.dockerignore` (or `COPY` wildcard) pattern.
#[derive(Debug)]
pub struct Pattern {
    re: Regex,
    /// `!pattern`: re-includes.
    exclusion: bool,
}

impl Pattern {
    /// Compiles `text` (without its `!`); `None` for an empty pattern.
    fn new(text: &str, exclusion: bool) -> Result<Option<Pattern>, String> {
        let cleaned = clean(text);
        if cleaned.is_empty() {
            return Ok(None);
        }
        let mut re = String::from("^");
        let chars: Vec<char> = cleaned.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                '*' if chars.get(i + 1) == Some(&'*') => {
                    i += 1;
                    if chars.get(i + 1) == Some(&'/') {
                        i += 1;
                    }
                    if i + 1 >= chars.len() {
                        re.push_str(".*");
                    } else {
                        re.push_str("(.*/)?");
                    }
                }
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                '[' => {
                    let end = chars[i + 1..]
                        .iter()
                        .position(|&c| c == ']')
                        .ok_or_else(|| format!("{text}: [ without ]"))?;
                    let mut class: String = chars[i + 1..i + 1 + end].iter().collect();
                    if let Some(rest) = class.strip_prefix('!') {
                        class = format!("^{rest}");
                    }
                    let class = class.replace('\\', "\\\\").replace('[', "\\[");
                    re.push('[');
                    re.push_str(&class);
                    re.push(']');
                    i += end + 1;
                }
                '\\' if i + 1 < chars.len() => {
                    i += 1;
                    re.push_str(&regex::escape(&chars[i].to_string()));
                }
                c => re.push_str(&regex::escape(&c.to_string())),
            }
            i += 1;
        }
        re.push('$');
        let re = regex::RegexBuilder::new(&re)
            .size_limit(1 << 20)
            .build()
            .map_err(|_| format!("{text}: not a valid pattern"))?;
        Ok(Some(Pattern { re, exclusion }))
    }

    /// Whether the pattern names `path` (clean, relative).
    pub fn matches(&self, path: &str) -> bool {
        self.re.is_match(path)
    }
}

/// `text` cleaned as Go's `filepath.Clean` would, relative: no leading `/` or `./`, no empty
/// or `.` components, `..` dropping the one before (never above the root).
fn clean(text: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in text.trim().split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The patterns of a `.dockerignore`.
#[derive(Debug, Default)]
pub struct Ignore {
    patterns: Vec<Pattern>,
}

impl Ignore {
    /// Parses a `.dockerignore`.
    ///
    /// # Errors
    /// A message naming the line of a bad pattern, or too many patterns.
    pub fn parse(text: &str) -> Result<Ignore, String> {
        let mut patterns = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (text, exclusion) = match line.strip_prefix('!') {
                Some(rest) => (rest.trim(), true),
                None => (line, false),
            };
            if let Some(p) = Pattern::new(text, exclusion)
                .map_err(|e| format!("{IGNORE_FILE} line {}: {e}", n + 1))?
            {
                patterns.push(p);
            }
            if patterns.len() > MAX_PATTERNS {
                return Err(format!(
                    "{IGNORE_FILE} has more than {MAX_PATTERNS} patterns"
                ));
            }
        }
        Ok(Ignore { patterns })
    }

    /// Whether `path` (clean, relative) is excluded: the last pattern that matches it or a
    /// directory above it decides.
    pub fn excludes(&self, path: &str) -> bool {
        let mut excluded = false;
        for p in &self.patterns {
            // An inclusion cannot exclude more once excluded; an exclusion matters only then.
            if p.exclusion != excluded {
                continue;
            }
            let hit =
                p.matches(path) || path.match_indices('/').any(|(i, _)| p.matches(&path[..i]));
            if hit {
                excluded = !p.exclusion;
            }
        }
        excluded
    }
}

/// A context entry's name, clean and relative (`./a/b/` → `a/b`).
fn entry_name(entry: &tar::Entry<'_, &[u8]>) -> Option<String> {
    entry.path().ok().map(|p| clean(&p.to_string_lossy()))
}

/// Errors of reading the context archive.
fn bad_archive() -> ServiceError {
    invalid("body", "the build context is not a valid tar archive")
}

/// `context` without the entries its `.dockerignore` excludes (the same bytes when it has
/// none). The ignore file itself stays out of `COPY`'s reach only if it excludes itself.
///
/// # Errors
/// `invalid_argument` for a bad `.dockerignore`, an archive that is not a tar, more than
/// `MAX_ENTRIES` entries, or a context that takes longer than `MAX_TIME` to filter.
pub fn apply_ignore(context: Bytes) -> Result<Bytes, ServiceError> {
    let mut ignore_text = None;
    let mut ar = tar::Archive::new(&context[..]);
    for entry in ar.entries().map_err(|_| bad_archive())? {
        let mut entry = entry.map_err(|_| bad_archive())?;
        if entry_name(&entry).as_deref() == Some(IGNORE_FILE)
            && entry.header().entry_type().is_file()
        {
            if entry.size() > MAX_IGNORE_BYTES {
                return Err(invalid(
                    "body",
                    format!("{IGNORE_FILE} is over {MAX_IGNORE_BYTES} bytes"),
                ));
            }
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|_| invalid("body", format!("{IGNORE_FILE} must be UTF-8 text")))?;
            ignore_text = Some(text);
        }
    }
    let Some(text) = ignore_text else {
        return Ok(context);
    };
    let ignore = Ignore::parse(&text).map_err(|e| invalid("body", e))?;
    if ignore.patterns.is_empty() {
        return Ok(context);
    }
    let began = Instant::now();
    let mut out = tar::Builder::new(Vec::with_capacity(context.len()));
    let mut ar = tar::Archive::new(&context[..]);
    for (n, entry) in ar.entries().map_err(|_| bad_archive())?.enumerate() {
        if n >= MAX_ENTRIES {
            return Err(invalid(
                "body",
                format!("the build context has more than {MAX_ENTRIES} entries"),
            ));
        }
        if began.elapsed() > MAX_TIME {
            return Err(invalid(
                "body",
                format!(
                    "the build context took over {} s to filter",
                    MAX_TIME.as_secs()
                ),
            ));
        }
        let mut entry = entry.map_err(|_| bad_archive())?;
        let Some(name) = entry_name(&entry) else {
            return Err(bad_archive());
        };
        if name.is_empty() || ignore.excludes(&name) {
            continue;
        }
        let mut header = entry.header().clone();
        let kind = header.entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name()
                .map_err(|_| bad_archive())?
                .ok_or_else(bad_archive)?
                .into_owned();
            out.append_link(&mut header, &name, target)
                .map_err(|_| bad_archive())?;
        } else {
            out.append_data(&mut header, &name, &mut entry)
                .map_err(|_| bad_archive())?;
        }
    }
    out.into_inner().map(Bytes::from).map_err(|_| bad_archive())
}

/// The names of the context's entries (clean, relative) and whether it holds symlinks.
fn names(context: &[u8]) -> (Vec<String>, bool) {
    let mut names = Vec::new();
    let mut links = false;
    let mut ar = tar::Archive::new(context);
    if let Ok(entries) = ar.entries() {
        for entry in entries.flatten().take(MAX_ENTRIES) {
            links |= entry.header().entry_type().is_symlink();
            if let Some(n) = entry_name(&entry) {
                names.push(n);
            }
        }
    }
    names.sort();
    names.dedup();
    (names, links)
}

/// Expands the wildcards of context `COPY` sources against the context's names (sorted; an
/// error naming the line when one matches nothing) and checks that every other source is in
/// the context (unless it holds symlinks, which a source may go through; the node checks
/// those).
///
/// # Errors
/// `invalid_argument` naming the line.
pub fn resolve_sources(context: &[u8], steps: &mut [FileStep]) -> Result<(), ServiceError> {
    let (names, links) = names(context);
    for step in steps {
        let line = step.line;
        let BuildStep::Copy {
            sources,
            from: None,
            ..
        } = &mut step.step
        else {
            continue;
        };
        let mut out = Vec::with_capacity(sources.len());
        for src in sources.iter() {
            if is_pattern(src) {
                let p = Pattern::new(src, false)
                    .map_err(|e| invalid("file", format!("line {line}: COPY source {e}")))?
                    .ok_or_else(|| invalid("file", format!("line {line}: empty COPY source")))?;
                let before = out.len();
                // Matches whose parent also matched are copied with it. Names are sorted, so
                // a parent's entries follow it closely; one that does not directly (`a-b`
                // sorts between `a` and `a/x`) is copied twice to the same place.
                for n in &names {
                    let covered = out[before..].last().is_some_and(|m: &String| {
                        n.strip_prefix(m.as_str())
                            .is_some_and(|r| r.starts_with('/'))
                    });
                    if p.matches(n) && !covered {
                        out.push(n.clone());
                        if out.len() - before > MAX_MATCHES {
                            return Err(invalid(
                                "file",
                                format!("line {line}: COPY source {src} matches more than {MAX_MATCHES} paths"),
                            ));
                        }
                    }
                }
                if out.len() == before {
                    return Err(invalid(
                        "file",
                        format!(
                            "line {line}: COPY source {src} matches nothing in the build context"
                        ),
                    ));
                }
                continue;
            }
            let found = links
                || src == "."
                || names.iter().any(|n| {
                    n == src
                        || n.strip_prefix(src.as_str())
                            .is_some_and(|r| r.starts_with('/'))
                });
            if !found {
                return Err(invalid(
                    "file",
                    format!("line {line}: COPY source {src} is not in the build context"),
                ));
            }
            out.push(src.clone());
        }
        *sources = out;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Bytes {
        let mut b = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(content.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, content.as_bytes())
                .expect("append");
        }
        Bytes::from(b.into_inner().expect("tar"))
    }

    #[test]
    fn dockerignore_patterns_match_as_docker_matches_them() {
        let ig = Ignore::parse(
            "# comment\n\n/node_modules\n*.pyc\n**/__pycache__\n.git\ndocs/*.md\n!docs/keep.md\n\
             build/**\n!build/out/**\ntmp?\n[ab].log\n",
        )
        .expect("parse");
        for (path, excluded) in [
            ("node_modules", true),
            ("node_modules/x/index.js", true),
            ("src/node_modules", false),
            ("a.pyc", true),
            ("src/a.pyc", false),
            ("__pycache__/m.pyc", true),
            ("src/pkg/__pycache__/m.pyc", true),
            (".git/HEAD", true),
            ("docs/a.md", true),
            ("docs/keep.md", false),
            ("docs/sub/a.md", false),
            ("build/x.o", true),
            ("build/out/app", false),
            ("tmp1", true),
            ("tmp12", false),
            ("a.log", true),
            ("c.log", false),
            ("app.py", false),
        ] {
            assert_eq!(ig.excludes(path), excluded, "{path}");
        }
        // Everything but what is re-included.
        let ig = Ignore::parse("*\n!src\n!requirements.txt\n").expect("parse");
        assert!(ig.excludes("README.md"));
        assert!(!ig.excludes("src/app.py") && !ig.excludes("requirements.txt"));
        assert!(Ignore::parse("[abc\n").expect_err("bad").contains("line 1"));
        let many = "x\n".repeat(MAX_PATTERNS + 1);
        assert!(Ignore::parse(&many).is_err());
    }

    #[test]
    fn an_ignored_entry_leaves_the_context_and_links_stay_links() {
        let mut b = tar::Builder::new(Vec::new());
        for (path, content) in [
            (".dockerignore", "secrets\n*.log\n"),
            ("Dockerfile", "FROM tiny\n"),
            ("app/main.py", "print(1)\n"),
            ("secrets/key", "k"),
            ("debug.log", "noise"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(content.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, content.as_bytes())
                .expect("append");
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "app/link", "/etc/passwd")
            .expect("link");
        let ctx = Bytes::from(b.into_inner().expect("tar"));
        let out = apply_ignore(ctx).expect("filter");
        let mut ar = tar::Archive::new(&out[..]);
        let mut seen = Vec::new();
        for e in ar.entries().expect("entries") {
            let e = e.expect("entry");
            let name = e.path().expect("path").to_string_lossy().into_owned();
            if name == "app/link" {
                assert!(e.header().entry_type().is_symlink());
                assert_eq!(
                    e.link_name().expect("l").expect("l").to_string_lossy(),
                    "/etc/passwd"
                );
            }
            seen.push(name);
        }
        assert_eq!(
            seen,
            [".dockerignore", "Dockerfile", "app/main.py", "app/link"]
        );
        // Without an ignore file, the same bytes.
        let plain = tar_of(&[("a", "1")]);
        assert_eq!(apply_ignore(plain.clone()).expect("same"), plain);
    }

    #[test]
    fn copy_wildcards_expand_against_the_context() {
        let ctx = tar_of(&[
            ("package.json", "{}"),
            ("package-lock.json", "{}"),
            ("src/index.js", ""),
            ("src/util.js", ""),
            ("README.md", ""),
        ]);
        let copy = |sources: &[&str]| FileStep {
            line: 3,
            text: "COPY".into(),
            step: BuildStep::Copy {
                sources: sources.iter().map(|s| s.to_string()).collect(),
                dest: "./".into(),
                from: None,
                chown: None,
                chmod: None,
            },
        };
        let mut steps = vec![copy(&["package*.json"]), copy(&["src/*.js", "README.md"])];
        resolve_sources(&ctx, &mut steps).expect("resolve");
        let srcs = |s: &FileStep| match &s.step {
            BuildStep::Copy { sources, .. } => sources.clone(),
            _ => unreachable!(),
        };
        assert_eq!(srcs(&steps[0]), ["package-lock.json", "package.json"]);
        assert_eq!(
            srcs(&steps[1]),
            ["src/index.js", "src/util.js", "README.md"]
        );
        let e = resolve_sources(&ctx, &mut [copy(&["*.toml"])]).expect_err("none");
        assert!(e.to_string().contains("line 3"), "{e}");
        let e = resolve_sources(&ctx, &mut [copy(&["missing.txt"])]).expect_err("missing");
        assert!(e.to_string().contains("not in the build context"), "{e}");
    }
}
