//! Template files: a Dockerfile subset parsed with the `dockerfile-parser` crate into the
//! node's build steps.
//!
//! Supported: one `FROM` (a Cove template, optionally pinned `name:N` or `name@sha256:…`, or
//! `oci-archive:NAME`, an image archive in the operator's OCI import directory), then `RUN` (shell or exec form), `COPY`/`ADD` (local context paths
//! only, no flags, no globs, never outside the context), `ENV`, `WORKDIR`, `USER`, `ARG` (with
//! a default), and Cove's `START CMD` and `READY [--timeout=SECONDS] CMD`. `$NAME` and
//! `${NAME}` of earlier `ARG`s and `ENV`s expand in `ENV`, `WORKDIR`, `USER` and `COPY`;
//! `RUN` leaves them to its shell. Anything else is an error naming its line.

use cove_node_api::{BuildStep, FileStep, ReadyCheck, StepProgram};
use dockerfile_parser::{Dockerfile, Instruction, ShellOrExecExpr};

/// Longest template file, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Default `READY` timeout, in seconds.
pub const DEFAULT_READY_TIMEOUT_S: u64 = 60;
/// Longest `READY` timeout, in seconds.
pub const MAX_READY_TIMEOUT_S: u64 = 3600;

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

/// Parses a template file.
///
/// # Errors
/// [`FileError`] for a syntax error, an unsupported instruction or flag, a `COPY` source
/// outside the context, a missing or second `FROM`, or a file over [`MAX_FILE_BYTES`].
pub fn parse(text: &str) -> Result<TemplateFile, FileError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(err(0, format!("the file is over {MAX_FILE_BYTES} bytes")));
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
    let mut from: Option<FromRef> = None;
    let mut steps = Vec::new();
    let mut vars: Vec<(String, String)> = Vec::new();
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
                    "only one FROM is supported (no multi-stage builds)",
                ));
            }
            if !f.flags.is_empty() || f.alias.is_some() {
                return Err(err(
                    line,
                    "FROM takes a template name only (no flags, no AS)",
                ));
            }
            let image = f.image.content.trim();
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
            if let Instruction::Arg(_) = ins {
                // ARGs before FROM are allowed but have no effect on the steps.
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
                        "COPY flags (--chown, --from, ...) are not supported",
                    ));
                }
                let sources = c
                    .sources
                    .iter()
                    .map(|s| context_path(line, &expand(&s.content, &vars)))
                    .collect::<Result<Vec<_>, _>>()?;
                BuildStep::Copy {
                    sources,
                    dest: expand(&c.destination.content, &vars),
                }
            }
            Instruction::Env(e) => {
                let parsed: Vec<(String, String)> = e
                    .vars
                    .iter()
                    .map(|v| {
                        (
                            v.key.content.clone(),
                            expand(&unquote(&v.value.to_string()), &vars),
                        )
                    })
                    .collect();
                vars.extend(parsed.iter().cloned());
                BuildStep::Env { vars: parsed }
            }
            Instruction::Arg(a) => {
                let value = a
                    .value
                    .as_ref()
                    .map(|v| unquote(&v.content))
                    .unwrap_or_default();
                let value = expand(&value, &vars);
                vars.push((a.name.content.clone(), value.clone()));
                BuildStep::Arg {
                    name: a.name.content.clone(),
                    value,
                }
            }
            Instruction::Misc(m) => {
                let args = m.arguments.to_string().trim().to_string();
                match m.instruction.content.to_ascii_uppercase().as_str() {
                    "ADD" => add_step(line, &args, &vars)?,
                    "WORKDIR" if !args.is_empty() => BuildStep::Workdir {
                        path: expand(&args, &vars),
                    },
                    "USER" if !args.is_empty() && !args.contains(char::is_whitespace) => {
                        BuildStep::User {
                            user: expand(&args, &vars),
                        }
                    }
                    "START" if !args.is_empty() => BuildStep::Start { command: args },
                    "READY" => ready_step(line, &args)?,
                    "WORKDIR" | "USER" | "START" => {
                        return Err(err(
                            line,
                            format!("{} needs one argument", m.instruction.content),
                        ))
                    }
                    other => return Err(err(line, format!("unsupported instruction {other}"))),
                }
            }
            Instruction::Label(_) | Instruction::Entrypoint(_) | Instruction::Cmd(_) => {
                let name = text_of
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                return Err(err(
                    line,
                    format!(
                        "unsupported instruction {name} (use START for a command sandboxes start)"
                    ),
                ));
            }
        };
        steps.push(FileStep {
            line,
            text: text_of,
            step,
        });
    }
    let from = from.ok_or_else(|| err(1, "the file has no FROM"))?;
    Ok(TemplateFile { from, steps })
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
fn add_step(line: u32, args: &str, vars: &[(String, String)]) -> Result<BuildStep, FileError> {
    if args.starts_with("--") {
        return Err(err(line, "ADD flags are not supported"));
    }
    let words: Vec<String> = args.split_whitespace().map(|w| expand(w, vars)).collect();
    if words.len() < 2 {
        return Err(err(line, "ADD needs a source and a destination"));
    }
    let (dest, sources) = words.split_last().unwrap_or((&words[0], &[]));
    if sources.iter().any(|s| s.contains("://")) {
        return Err(err(line, "ADD from a URL is not supported"));
    }
    Ok(BuildStep::Copy {
        sources: sources
            .iter()
            .map(|s| context_path(line, s))
            .collect::<Result<_, _>>()?,
        dest: dest.clone(),
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

fn unquote(v: &str) -> String {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

/// Expands `$NAME` and `${NAME}` with the latest value of `vars` (unknown names become empty,
/// as in Docker).
fn expand(s: &str, vars: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
            out.push_str(&lookup(&name));
        } else {
            let mut name = String::new();
            while let Some(c) = chars
                .peek()
                .copied()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                name.push(c);
                chars.next();
            }
            if name.is_empty() {
                out.push('$');
            } else {
                out.push_str(&lookup(&name));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instruction_parses_into_steps() {
        let f = parse(
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
                    ("B".into(), "two words".into()),
                    ("P".into(), "/opt/1.2".into())
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
                path: "/opt/1.2".into()
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
            parse("FROM oci-archive:img.tar\n").expect("oci").from,
            FromRef::OciArchive("img.tar".into())
        );
        assert_eq!(
            parse("FROM oci-archive:team/app-1.tar\n")
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
            let e = parse(&format!("FROM oci-archive:{name}\n")).expect_err(name);
            assert_eq!(e.line, 1, "{name}");
            assert!(e.message.contains("OCI import directory"), "{name}: {e}");
        }
    }

    #[test]
    fn bad_files_name_their_line() {
        let line = |t: &str| parse(t).expect_err(t).line;
        assert_eq!(line("FROM tiny\nRUN true\nEXPOSE 80\n"), 3);
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
        let e = parse("FROM tiny\nHEALTHCHECK CMD true\n").expect_err("unsupported");
        assert_eq!(e.to_string(), "line 2: unsupported instruction HEALTHCHECK");
        // Inside the context is fine, however written.
        assert!(parse("FROM tiny\nCOPY ./a/../b /x\n").is_ok());
    }
}
