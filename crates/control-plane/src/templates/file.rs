//! Template files: a Dockerfile subset parsed with the `dockerfile-parser` crate into the
//! node's build steps.
//!
//! Supported: one `FROM` (a Cove template, optionally pinned `name:N` or `name@sha256:…`, or
//! `oci-archive:NAME`, an image archive in the operator's OCI import directory), then `RUN`
//! (shell or exec form), `COPY`/`ADD` (local context paths only, no flags, no globs, never
//! outside the context), `ENV`, `WORKDIR`, `USER`, `ARG` (a `--build-arg` overrides its
//! default; an `ARG` before `FROM` serves `FROM` and a later `ARG NAME` without a default),
//! `LABEL` and `EXPOSE` (recorded in the release's defaults),
//! and Cove's `START CMD` and `READY [--timeout=SECONDS] CMD`. Words expand as Docker expands
//! them ([`cove_node_api::words`]): in `ENV`, `ARG`, `WORKDIR`, `USER`, `LABEL`, `EXPOSE` and a
//! `COPY` destination the node expands them against the build's environment (the parent's
//! `ENV` included, so `ENV PATH=/opt/tool/bin:$PATH` keeps the parent's `PATH`); `COPY`
//! sources expand here, with the file's own `ARG`s and `ENV`s; `RUN` leaves them to its shell.
//! Anything else is an error naming its line and what to use instead.

use std::collections::{BTreeMap, BTreeSet};

use cove_node_api::words::{self, Vars};
use cove_node_api::{BuildStep, FileStep, ReadyCheck, StepProgram};
use dockerfile_parser::{Dockerfile, Instruction, ShellOrExecExpr};

/// Longest template file, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Default `READY` timeout, in seconds.
pub const DEFAULT_READY_TIMEOUT_S: u64 = 60;
/// Longest `READY` timeout, in seconds.
pub const MAX_READY_TIMEOUT_S: u64 = 3600;
/// Most `--build-arg`s of one build.
pub const MAX_BUILD_ARGS: usize = 256;

/// What a template file starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromRef {
    /// A Cove template, with its pin as written (`base`, `base:3`, `base@sha256:…`).
    Template(String),
    /// An OCI image archive in the server's OCI import directory, by its relative name there.
    OciArchive(String),
}

/// A parsed template file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFile {
    /// Its `FROM`.
    pub from: FromRef,
    /// The steps after `FROM`.
    pub steps: Vec<FileStep>,
    /// `--build-arg`s no `ARG` of the file declares (Docker warns about them).
    pub unused_args: Vec<String>,
}

/// Why a template file is refused: the 1-based line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FileError {
    /// 1-based line (0 when the file as a whole is wrong).
    pub line: u32,
    /// What is wrong.
    pub message: String,
}

fn err(line: u32, message: impl Into<String>) -> FileError {
    FileError {
        line,
        message: message.into(),
    }
}

/// Longest `oci-archive:` name, in bytes.
const MAX_IMPORT_NAME_BYTES: usize = 1024;

/// Whether `name` is a plain relative path (`app.tar`, `team/app.tar`): no leading `/`, no
/// `.`/`..` or empty components, no control characters, at most [`MAX_IMPORT_NAME_BYTES`].
fn import_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_IMPORT_NAME_BYTES
        && !name.chars().any(char::is_control)
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= 255)
}

/// The variables the file itself defines so far: what `FROM` and `COPY` sources expand with.
#[derive(Default)]
struct Local {
    env: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
}

impl Local {
    fn expand(&self, line: u32, what: &str, word: &str) -> Result<String, FileError> {
        words::expand(
            word,
            &Vars {
                env: Some(&self.env),
                args: Some(&self.args),
            },
        )
        .map_err(|e| err(line, format!("{what}: {e}")))
    }
}

/// Parses a template file; `build_args` are the build's `--build-arg NAME=VALUE`s.
///
/// # Errors
/// [`FileError`] for a syntax error, an unsupported instruction or flag, a `COPY` source
/// outside the context, a missing or second `FROM`, a word that does not expand, or a file
/// over [`MAX_FILE_BYTES`].
pub fn parse(text: &str, build_args: &BTreeMap<String, String>) -> Result<TemplateFile, FileError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(err(0, format!("the file is over {MAX_FILE_BYTES} bytes")));
    }
    if build_args.len() > MAX_BUILD_ARGS {
        return Err(err(
            0,
            format!("more than {MAX_BUILD_ARGS} build arguments"),
        ));
    }
    let file = Dockerfile::parse(text).map_err(|e| {
        let msg = e.to_string();
        // pest's message points at `--> LINE:COL`.
        let line = msg
            .split_once("--> ")
            .and_then(|(_, rest)| rest.split(':').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let expected = msg
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .trim_start_matches("= ");
        err(line, format!("syntax error: {expected}"))
    })?;
    let line_of = |offset: usize| -> u32 {
        text.as_bytes()[..offset.min(text.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u32
            + 1
    };
    // The raw `NAME=VALUE` text of a span (quotes and `$` as written), when it is one line.
    let raw_value = |start: usize, end: usize, name: &str| -> Option<String> {
        let raw = text.get(start..end.min(text.len()))?;
        let rest = raw.trim().strip_prefix(name)?;
        // `NAME=VALUE`, or the legacy `ENV NAME VALUE`.
        let value = match rest.strip_prefix('=') {
            Some(v) => v,
            None if rest.starts_with([' ', '\t']) => rest.trim_start(),
            None => return None,
        };
        (!value.contains('\n')).then(|| value.to_string())
    };
    let mut from: Option<FromRef> = None;
    let mut steps = Vec::new();
    let mut meta = Local::default();
    let mut local = Local::default();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for ins in &file.instructions {
        let span = instruction_span(ins);
        let line = line_of(span.0);
        let text_of = text[span.0..span.1.min(text.len())]
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        if let Instruction::From(f) = ins {
            if from.is_some() {
                return Err(err(
                    line,
                    "only one FROM is supported (no multi-stage builds: build the first stage \
                     as its own template and start FROM it)",
                ));
            }
            if !f.flags.is_empty() || f.alias.is_some() {
                return Err(err(
                    line,
                    "FROM takes a template name only (no flags, no AS)",
                ));
            }
            let image = meta.expand(line, "FROM", f.image.content.trim())?;
            from = Some(match image.strip_prefix("oci-archive:") {
                Some(name) if import_name_ok(name) => FromRef::OciArchive(name.to_string()),
                Some(_) => {
                    return Err(err(
                        line,
                        "oci-archive: takes the name of an image archive in the server's OCI \
                         import directory (a relative path such as `app.tar`, without `..`), \
                         never a host path",
                    ))
                }
                None => FromRef::Template(image.to_string()),
            });
            continue;
        }
        if from.is_none() {
            if let Instruction::Arg(a) = ins {
                // ARGs before FROM serve FROM, and later ARGs of the same name without a
                // default.
                let name = a.name.content.clone();
                let value = match build_args.get(&name) {
                    Some(v) => {
                        used.insert(a.name.content.as_str());
                        v.clone()
                    }
                    None => match &a.value {
                        Some(v) => meta.expand(line, "ARG", &v.content)?,
                        None => String::new(),
                    },
                };
                meta.args.insert(name, value);
                continue;
            }
            return Err(err(line, "the file must start with FROM"));
        }
        let step = match ins {
            Instruction::From(_) => continue,
            Instruction::Run(r) => BuildStep::Run {
                program: match &r.expr {
                    ShellOrExecExpr::Shell(s) => {
                        StepProgram::Shell(s.to_string().trim().to_string())
                    }
                    ShellOrExecExpr::Exec(a) => {
                        StepProgram::Argv(a.elements.iter().map(|e| e.content.clone()).collect())
                    }
                },
            },
            Instruction::Copy(c) => {
                if !c.flags.is_empty() {
                    return Err(err(
                        line,
                        "COPY flags (--chown, --chmod, --from, ...) are not supported (COPY, \
                         then RUN chown or chmod; for --from, build that stage as a template)",
                    ));
                }
                let sources = c
                    .sources
                    .iter()
                    .map(|s| context_path(line, &local.expand(line, "COPY", &s.content)?))
                    .collect::<Result<Vec<_>, _>>()?;
                local.expand(line, "COPY", &c.destination.content)?;
                BuildStep::Copy {
                    sources,
                    dest: c.destination.content.clone(),
                }
            }
            Instruction::Env(e) => {
                let mut vars = Vec::new();
                for v in &e.vars {
                    let key = v.key.content.clone();
                    let raw = raw_value(v.span.start, v.span.end, &key)
                        .unwrap_or_else(|| words::literal(&v.value.to_string()));
                    vars.push((key, raw));
                }
                let before = Local {
                    env: local.env.clone(),
                    args: local.args.clone(),
                };
                for (k, raw) in &vars {
                    let value = before.expand(line, "ENV", raw)?;
                    local.env.insert(k.clone(), value);
                }
                BuildStep::Env { vars }
            }
            Instruction::Arg(a) => {
                let name = a.name.content.clone();
                let value = if let Some(v) = build_args.get(&name) {
                    used.insert(a.name.content.as_str());
                    words::literal(v)
                } else if let Some(v) = &a.value {
                    v.content.clone()
                } else if let Some(v) = meta.args.get(&name) {
                    words::literal(v)
                } else {
                    String::new()
                };
                let local_value = local.expand(line, "ARG", &value)?;
                local.args.insert(name.clone(), local_value);
                BuildStep::Arg { name, value }
            }
            Instruction::Label(l) => {
                let mut labels = Vec::new();
                for label in &l.labels {
                    let key = label.name.content.clone();
                    let raw = raw_value(label.span.start, label.span.end, &key)
                        .unwrap_or_else(|| words::literal(&label.value.content));
                    local.expand(line, "LABEL", &raw)?;
                    labels.push((words::literal(&key), raw));
                }
                BuildStep::Label { labels }
            }
            Instruction::Misc(m) => {
                let args = m.arguments.to_string().trim().to_string();
                match m.instruction.content.to_ascii_uppercase().as_str() {
                    "ADD" => add_step(line, &args, &local)?,
                    "WORKDIR" if !args.is_empty() => {
                        local.expand(line, "WORKDIR", &args)?;
                        BuildStep::Workdir { path: args }
                    }
                    "USER" if !args.is_empty() && !args.contains(char::is_whitespace) => {
                        local.expand(line, "USER", &args)?;
                        BuildStep::User { user: args }
                    }
                    "EXPOSE" if !args.is_empty() => {
                        let ports: Vec<String> =
                            args.split_whitespace().map(str::to_string).collect();
                        for p in &ports {
                            if !p.contains('$') {
                                let p = local.expand(line, "EXPOSE", p)?;
                                cove_node_api::exposed_port(&p).map_err(|e| err(line, e))?;
                            }
                        }
                        BuildStep::Expose { ports }
                    }
                    "START" if !args.is_empty() => BuildStep::Start { command: args },
                    "READY" => ready_step(line, &args)?,
                    "WORKDIR" | "USER" | "START" | "EXPOSE" => {
                        return Err(err(
                            line,
                            format!("{} needs one argument", m.instruction.content),
                        ))
                    }
                    other => return Err(err(line, unsupported(other))),
                }
            }
            Instruction::Entrypoint(_) | Instruction::Cmd(_) => {
                let name = text_of
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                return Err(err(line, unsupported(&name)));
            }
        };
        steps.push(FileStep {
            line,
            text: text_of,
            step,
        });
    }
    let from = from.ok_or_else(|| err(1, "the file has no FROM"))?;
    let unused_args = build_args
        .keys()
        .filter(|k| !used.contains(k.as_str()))
        .cloned()
        .collect();
    Ok(TemplateFile {
        from,
        steps,
        unused_args,
    })
}

/// The message of an instruction Cove does not run, with what to use instead.
fn unsupported(name: &str) -> String {
    let instead = match name {
        "CMD" | "ENTRYPOINT" => "use START for a command sandboxes start",
        "HEALTHCHECK" => "use READY for a check sandboxes must pass",
        "VOLUME" => "use Cove volumes: cove create --volume",
        "SHELL" => "RUN runs /bin/sh -c; use the exec form RUN [\"bash\", \"-c\", \"...\"]",
        "STOPSIGNAL" => "sandboxes stop as a whole; there is no main process to signal",
        "ONBUILD" => "put the steps in the templates that start FROM this one",
        "MAINTAINER" => "use LABEL maintainer=...",
        _ => "see docs/templates.md for what is supported",
    };
    format!("unsupported instruction {name} ({instead})")
}

fn instruction_span(ins: &Instruction) -> (usize, usize) {
    let s = match ins {
        Instruction::From(i) => &i.span,
        Instruction::Arg(i) => &i.span,
        Instruction::Label(i) => &i.span,
        Instruction::Run(i) => &i.span,
        Instruction::Entrypoint(i) => &i.span,
        Instruction::Cmd(i) => &i.span,
        Instruction::Copy(i) => &i.span,
        Instruction::Env(i) => &i.span,
        Instruction::Misc(i) => &i.span,
    };
    (s.start, s.end)
}

/// `ADD SRC... DEST`: like COPY for context paths; URLs and archives are not supported.
fn add_step(line: u32, args: &str, local: &Local) -> Result<BuildStep, FileError> {
    if args.starts_with("--") {
        return Err(err(
            line,
            "ADD flags are not supported (ADD, then RUN chown or chmod)",
        ));
    }
    let raw: Vec<&str> = args.split_whitespace().collect();
    if raw.len() < 2 {
        return Err(err(line, "ADD needs a source and a destination"));
    }
    let (dest, sources) = raw.split_last().unwrap_or((&raw[0], &[]));
    let sources = sources
        .iter()
        .map(|s| local.expand(line, "ADD", s))
        .collect::<Result<Vec<_>, _>>()?;
    if sources.iter().any(|s| s.contains("://")) {
        return Err(err(
            line,
            "ADD from a URL is not supported (RUN curl -fsSLo DEST URL)",
        ));
    }
    local.expand(line, "ADD", dest)?;
    Ok(BuildStep::Copy {
        sources: sources
            .iter()
            .map(|s| context_path(line, s))
            .collect::<Result<_, _>>()?,
        dest: dest.to_string(),
    })
}

/// `READY [--timeout=SECONDS] CMD`.
fn ready_step(line: u32, args: &str) -> Result<BuildStep, FileError> {
    let (timeout_s, command) = match args.strip_prefix("--timeout=") {
        Some(rest) => {
            let (t, cmd) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let t = t.trim_end_matches('s');
            let t: u64 = t
                .parse()
                .ok()
                .filter(|t| (1..=MAX_READY_TIMEOUT_S).contains(t))
                .ok_or_else(|| {
                    err(
                        line,
                        format!("READY --timeout is 1 to {MAX_READY_TIMEOUT_S} seconds"),
                    )
                })?;
            (t, cmd.trim().to_string())
        }
        None if args.starts_with("--") => {
            return Err(err(line, "READY takes only --timeout=SECONDS"))
        }
        None => (DEFAULT_READY_TIMEOUT_S, args.to_string()),
    };
    if command.is_empty() {
        return Err(err(line, "READY needs a command"));
    }
    Ok(BuildStep::Ready(ReadyCheck { command, timeout_s }))
}

/// A `COPY` source as a clean path relative to the context root.
fn context_path(line: u32, src: &str) -> Result<String, FileError> {
    if src.contains(['*', '?', '[']) {
        return Err(err(
            line,
            format!("COPY source {src}: wildcards are not supported"),
        ));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in src.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(err(
                        line,
                        format!("COPY source {src} is outside the build context"),
                    ));
                }
            }
            p => parts.push(p),
        }
    }
    Ok(if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_(text: &str) -> Result<TemplateFile, FileError> {
        parse(text, &BTreeMap::new())
    }

    #[test]
    fn every_instruction_parses_into_steps() {
        let f = parse_(
            "# a template\nFROM base:3\nARG V=1.2\nENV A=x B=\"two words\" P=/opt/$V\nRUN echo a \\\n  && echo b\n\
             COPY app/ /srv/app/\nADD notes.txt /srv/\nWORKDIR ${P}\nUSER user\n\
             START python3 -m http.server 8000\nREADY --timeout=30 curl -s localhost:8000\nRUN [\"ls\", \"-l\"]\n",
        )
        .expect("parse");
        assert_eq!(f.from, FromRef::Template("base:3".into()));
        let kinds: Vec<u32> = f.steps.iter().map(|s| s.line).collect();
        assert_eq!(kinds, vec![3, 4, 5, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(
            f.steps[1].step,
            BuildStep::Env {
                vars: vec![
                    ("A".into(), "x".into()),
                    ("B".into(), "\"two words\"".into()),
                    ("P".into(), "/opt/$V".into())
                ]
            }
        );
        assert_eq!(
            f.steps[2].step,
            BuildStep::Run {
                program: StepProgram::Shell("echo a   && echo b".into())
            }
        );
        assert_eq!(
            f.steps[3].step,
            BuildStep::Copy {
                sources: vec!["app".into()],
                dest: "/srv/app/".into()
            }
        );
        assert_eq!(
            f.steps[5].step,
            BuildStep::Workdir {
                path: "${P}".into()
            }
        );
        assert_eq!(
            f.steps[8].step,
            BuildStep::Ready(ReadyCheck {
                command: "curl -s localhost:8000".into(),
                timeout_s: 30
            })
        );
        assert_eq!(
            f.steps[9].step,
            BuildStep::Run {
                program: StepProgram::Argv(vec!["ls".into(), "-l".into()])
            }
        );
        assert_eq!(
            parse_("FROM oci-archive:img.tar\n").expect("oci").from,
            FromRef::OciArchive("img.tar".into())
        );
        assert_eq!(
            parse_("FROM oci-archive:team/app-1.tar\n")
                .expect("oci")
                .from,
            FromRef::OciArchive("team/app-1.tar".into())
        );
    }

    #[test]
    fn oci_archive_names_are_plain_relative_names_never_host_paths() {
        for name in [
            "/etc/shadow",
            "/dev/zero",
            "../etc/shadow",
            "a/../../b",
            "./a.tar",
            "a//b",
            "a/",
            "",
        ] {
            let e = parse_(&format!("FROM oci-archive:{name}\n")).expect_err(name);
            assert_eq!(e.line, 1, "{name}");
            assert!(e.message.contains("OCI import directory"), "{name}: {e}");
        }
    }

    #[test]
    fn bad_files_name_their_line() {
        let line = |t: &str| parse_(t).expect_err(t).line;
        assert_eq!(line("FROM tiny\nRUN true\nEXPOSE http\n"), 3);
        assert_eq!(line("FROM tiny\nRUN true\nVOLUME /data\n"), 3);
        assert_eq!(line("FROM tiny\nENV A=${B\n"), 2);
        assert_eq!(line("FROM tiny\n\nCOPY ../secret /x\n"), 3);
        assert_eq!(line("FROM tiny\nCOPY a/../../b /x\n"), 2);
        assert_eq!(line("RUN true\n"), 1);
        assert_eq!(line("# nothing\n"), 1);
        assert_eq!(line("FROM tiny\nFROM base\n"), 2);
        assert_eq!(line("FROM tiny\nCMD [\"x\"]\n"), 2);
        assert_eq!(line("FROM tiny\nRUN\n"), 2);
        assert_eq!(line("FROM tiny\nCOPY --chown=1 a /b\n"), 2);
        assert_eq!(line("FROM tiny\nREADY --timeout=0 true\n"), 2);
        assert_eq!(line("FROM tiny\nADD http://x/y /z\n"), 2);
        let e = parse_("FROM tiny\nHEALTHCHECK CMD true\n").expect_err("unsupported");
        assert_eq!(
            e.to_string(),
            "line 2: unsupported instruction HEALTHCHECK (use READY for a check sandboxes must pass)"
        );
        // Inside the context is fine, however written.
        assert!(parse_("FROM tiny\nCOPY ./a/../b /x\n").is_ok());
    }

    #[test]
    fn words_reach_the_node_as_written() {
        let f = parse_(
            "FROM base\nENV PATH=/opt/tool/bin:$PATH\nENV GOPATH /go\nRUN mkdir -p /opt/tool/bin\n\
             ENV LD=${LD_LIBRARY_PATH:-/usr/lib} HOME_BIN=\\$HOME/bin\n",
        )
        .expect("parse");
        let env = |i: usize| match &f.steps[i].step {
            BuildStep::Env { vars } => vars.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(env(0), [("PATH".into(), "/opt/tool/bin:$PATH".into())]);
        assert_eq!(env(1), [("GOPATH".into(), "/go".into())]);
        assert_eq!(
            env(3),
            [
                ("LD".into(), "${LD_LIBRARY_PATH:-/usr/lib}".into()),
                ("HOME_BIN".into(), "\\$HOME/bin".into())
            ]
        );
        // What the node makes of them with a parent's PATH.
        let parent: BTreeMap<String, String> =
            [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
        let expanded = f.steps[0]
            .step
            .expanded(&parent, &BTreeMap::new())
            .expect("expand");
        assert_eq!(
            expanded,
            BuildStep::Env {
                vars: vec![("PATH".into(), "/opt/tool/bin:/usr/bin:/bin".into())]
            }
        );
        let expanded = f.steps[3]
            .step
            .expanded(&parent, &BTreeMap::new())
            .expect("expand");
        assert_eq!(
            expanded,
            BuildStep::Env {
                vars: vec![
                    ("LD".into(), "/usr/lib".into()),
                    ("HOME_BIN".into(), "$HOME/bin".into())
                ]
            }
        );
    }

    #[test]
    fn build_args_labels_and_ports() {
        let args: BTreeMap<String, String> = [
            ("VERSION".to_string(), "3".to_string()),
            ("TOOL".to_string(), "a $b".to_string()),
            ("UNUSED".to_string(), "x".to_string()),
        ]
        .into();
        let f = parse(
            "ARG VERSION=1\nFROM base:${VERSION}\nARG VERSION\nARG TOOL=dflt\nARG PLAIN=p\n\
             LABEL org.opencontainers.image.title=\"My tool\" version=$VERSION\nEXPOSE 8000 53/udp\n\
             COPY dir-$PLAIN /x/\n",
            &args,
        )
        .expect("parse");
        assert_eq!(f.from, FromRef::Template("base:3".into()));
        assert_eq!(f.unused_args, ["UNUSED"]);
        let empty = BTreeMap::new();
        let mut arg_vals = BTreeMap::new();
        for s in &f.steps[..3] {
            match s.step.expanded(&empty, &arg_vals).expect("expand") {
                BuildStep::Arg { name, value } => {
                    arg_vals.insert(name, value);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(arg_vals["VERSION"], "3");
        assert_eq!(arg_vals["TOOL"], "a $b");
        assert_eq!(arg_vals["PLAIN"], "p");
        assert_eq!(
            f.steps[3].step.expanded(&empty, &arg_vals).expect("label"),
            BuildStep::Label {
                labels: vec![
                    ("org.opencontainers.image.title".into(), "My tool".into()),
                    ("version".into(), "3".into())
                ]
            }
        );
        assert_eq!(
            f.steps[4].step,
            BuildStep::Expose {
                ports: vec!["8000".into(), "53/udp".into()]
            }
        );
        assert_eq!(
            f.steps[5].step,
            BuildStep::Copy {
                sources: vec!["dir-p".into()],
                dest: "/x/".into()
            }
        );
        // Pairs continued over lines keep their words as written too.
        let f = parse_("FROM base\nENV LANG=C.UTF-8 \\\n    PATH=/x/bin:$PATH\n").expect("parse");
        assert_eq!(
            f.steps[0].step,
            BuildStep::Env {
                vars: vec![
                    ("LANG".into(), "C.UTF-8".into()),
                    ("PATH".into(), "/x/bin:$PATH".into())
                ]
            }
        );
        assert_eq!(f.steps[0].line, 2);
        assert_eq!(cove_node_api::exposed_port("8000"), Ok(Some(8000)));
        assert_eq!(cove_node_api::exposed_port("53/udp"), Ok(None));
        assert!(cove_node_api::exposed_port("0").is_err());
    }
}
