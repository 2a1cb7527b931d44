//! Template files: a Dockerfile subset parsed with the `dockerfile-parser` crate into the
//! node's build steps.
//!
//! Supported: `FROM` (a Cove template, optionally pinned `name:N` or `name@sha256:…`,
//! `oci-archive:NAME`, an image archive in the operator's OCI import directory, or an earlier
//! stage) with `AS NAME` (multi-stage: every `FROM` starts a stage, the last one is the
//! release), then `RUN` (shell or exec form), `COPY`/`ADD` (context paths, `*`/`?`/`[…]`
//! wildcards expanded against the context, never outside it; `--chown`, `--chmod` (octal),
//! `--from=STAGE|TEMPLATE`, `--link` accepted), `ENV`, `WORKDIR`, `USER`, `ARG` (a
//! `--build-arg` overrides its default; an `ARG` before `FROM` serves `FROM` and a later
//! `ARG NAME` without a default), `LABEL` and `EXPOSE` (recorded in the release's defaults),
//! `CMD` and `ENTRYPOINT` (exec or shell form, combined as Docker combines them: the start
//! command), and Cove's `START CMD` and `READY [--timeout=SECONDS] CMD`. Words expand as Docker expands
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

/// Most stages of one file (its `FROM`s and the templates `COPY --from` names).
pub const MAX_STAGES: usize = 32;

/// What a template file (or one of its stages) starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromRef {
    /// A Cove template, with its pin as written (`base`, `base:3`, `base@sha256:…`).
    Template(String),
    /// An OCI image archive in the server's OCI import directory, by its relative name there.
    OciArchive(String),
    /// An earlier stage, by its index in [`TemplateFile::stages`].
    Stage(u32),
}

/// A stage before the last `FROM` (or a template `COPY --from` names, with no steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Its `AS` name, its `FROM` number, or the template it names.
    pub name: String,
    /// Its `FROM`.
    pub from: FromRef,
    /// Its steps.
    pub steps: Vec<FileStep>,
    /// The line of its `FROM` (or of the `COPY --from` that named it).
    pub line: u32,
}

/// A parsed template file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFile {
    /// Its last `FROM`.
    pub from: FromRef,
    /// The line of that `FROM`.
    pub from_line: u32,
    /// The steps after the last `FROM`.
    pub steps: Vec<FileStep>,
    /// The stages before the last `FROM`, in file order, with a template that a
    /// `COPY --from` names placed before the stage that names it.
    pub stages: Vec<Stage>,
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
    let mut from_line = 0;
    let mut steps = Vec::new();
    // Stages before the current one; the current stage's `AS` name; stage names (lower
    // case) and the stage index of each earlier `FROM` (Docker's `--from=N`).
    let mut stages: Vec<Stage> = Vec::new();
    let mut cur_alias: Option<String> = None;
    let mut names: Vec<(String, u32)> = Vec::new();
    let mut froms: Vec<u32> = Vec::new();
    let mut start = StartCmd::default();
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
            if let Some(prev) = from.take() {
                let index = stages.len() as u32;
                let name = cur_alias.take().unwrap_or_else(|| froms.len().to_string());
                if let Some(alias) = stage_alias(&name) {
                    names.push((alias, index));
                }
                froms.push(index);
                stages.push(Stage {
                    name,
                    from: prev,
                    steps: std::mem::take(&mut steps),
                    line: from_line,
                });
                if stages.len() >= MAX_STAGES {
                    return Err(err(line, format!("more than {MAX_STAGES} stages")));
                }
            }
            if !f.flags.is_empty() {
                return Err(err(
                    line,
                    "FROM takes no flags (--platform: sandboxes run the node's own \
                     architecture)",
                ));
            }
            if let Some(a) = &f.alias {
                if stage_alias(&a.content).is_none() {
                    return Err(err(
                        line,
                        "a stage name (AS NAME) starts with a letter and holds letters, \
                         digits, '-', '_' and '.'",
                    ));
                }
                cur_alias = Some(a.content.clone());
            }
            let image = meta.expand(line, "FROM", f.image.content.trim())?;
            from_line = line;
            from = Some(from_ref(line, &image, &names)?);
            local = Local::default();
            start = StartCmd::default();
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
                let mut flags = CopyFlags::default();
                for f in &c.flags {
                    flags.set(line, &f.name.content, &f.value.content, &local)?;
                }
                // The parser takes a flag without `=VALUE` (`--link`) for a source.
                let mut words = c.sources.iter().map(|s| s.content.as_str()).peekable();
                while let Some(flag) = words.peek().and_then(|w| w.strip_prefix("--")) {
                    let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
                    flags.set(line, name, value, &local)?;
                    words.next();
                }
                let srcs = words
                    .map(|s| local.expand(line, "COPY", s))
                    .collect::<Result<Vec<_>, _>>()?;
                if srcs.is_empty() {
                    return Err(err(line, "COPY needs a source and a destination"));
                }
                local.expand(line, "COPY", &c.destination.content)?;
                copy_step(
                    line,
                    flags,
                    &srcs,
                    c.destination.content.clone(),
                    (&names, &froms),
                    &mut stages,
                )?
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
                    "ADD" => add_step(line, &args, &local, (&names, &froms), &mut stages)?,
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
            Instruction::Entrypoint(e) => {
                start.entrypoint = Some(Form::of(&e.expr));
                match start.command() {
                    Some(command) => BuildStep::Start { command },
                    None => continue,
                }
            }
            Instruction::Cmd(c) => {
                start.cmd = Some(Form::of(&c.expr));
                match start.command() {
                    Some(command) => BuildStep::Start { command },
                    None => continue,
                }
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
        from_line,
        steps,
        stages,
        unused_args,
    })
}

/// The message of an instruction Cove does not run, with what to use instead.
fn unsupported(name: &str) -> String {
    let instead = match name {
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

/// `ADD [--chown=…] [--chmod=…] SRC... DEST`: like COPY for context paths; URLs and
/// archives are not supported.
fn add_step(
    line: u32,
    args: &str,
    local: &Local,
    named: (&[(String, u32)], &[u32]),
    stages: &mut Vec<Stage>,
) -> Result<BuildStep, FileError> {
    let mut raw: Vec<&str> = args.split_whitespace().collect();
    let mut flags = CopyFlags::default();
    while let Some(flag) = raw.first().and_then(|w| w.strip_prefix("--")) {
        let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
        if name == "from" {
            return Err(err(line, "ADD --from is not supported (use COPY --from)"));
        }
        flags.set(line, name, value, local)?;
        raw.remove(0);
    }
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
    copy_step(line, flags, &sources, dest.to_string(), named, stages)
}

/// The flags of one `COPY` or `ADD`.
#[derive(Default)]
struct CopyFlags {
    from: Option<String>,
    chown: Option<String>,
    chmod: Option<u32>,
}

impl CopyFlags {
    fn set(&mut self, line: u32, name: &str, value: &str, local: &Local) -> Result<(), FileError> {
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "from" if !value.is_empty() => {
                self.from = Some(local.expand(line, "COPY --from", value)?);
            }
            "chown" if !value.is_empty() && !value.contains(char::is_whitespace) => {
                // Expanded on the node, with the build's environment.
                self.chown = Some(value.to_string());
            }
            "chmod" => {
                let mode = u32::from_str_radix(value, 8)
                    .ok()
                    .filter(|m| *m <= 0o7777 && !value.is_empty());
                self.chmod = Some(mode.ok_or_else(|| {
                    err(
                        line,
                        "--chmod takes an octal mode such as 0755 (for a symbolic mode, \
                         COPY, then RUN chmod)",
                    )
                })?);
            }
            // BuildKit's layer-reuse hint: the files are the same without it.
            "link" if value.is_empty() || value == "true" => {}
            "from" | "chown" => return Err(err(line, format!("--{name} needs a value"))),
            other => {
                return Err(err(
                    line,
                    format!(
                        "flag --{other} is not supported (COPY takes --from, --chown, \
                         --chmod and --link)"
                    ),
                ))
            }
        }
        Ok(())
    }
}

/// The `COPY` step of `srcs` (expanded) to `dest` (as written) with `flags`. A `--from` that
/// names no earlier stage names a template (or `oci-archive:`), added to `stages` as a stage
/// without steps.
fn copy_step(
    line: u32,
    flags: CopyFlags,
    srcs: &[String],
    dest: String,
    (names, froms): (&[(String, u32)], &[u32]),
    stages: &mut Vec<Stage>,
) -> Result<BuildStep, FileError> {
    let from = match &flags.from {
        None => None,
        Some(f) => Some(if let Some(i) = stage_index(f, names, froms) {
            i
        } else if f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(
                line,
                format!("COPY --from={f}: there is no earlier stage {f}"),
            ));
        } else if let Some(i) = stages
            .iter()
            .position(|s| s.steps.is_empty() && s.name == *f)
        {
            i as u32
        } else {
            if stages.len() >= MAX_STAGES {
                return Err(err(line, format!("more than {MAX_STAGES} stages")));
            }
            stages.push(Stage {
                name: f.clone(),
                from: from_ref(line, f, names)?,
                steps: Vec::new(),
                line,
            });
            (stages.len() - 1) as u32
        }),
    };
    let sources = srcs
        .iter()
        .map(|s| match from {
            None => context_path(line, s),
            Some(_) => stage_path(line, s),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BuildStep::Copy {
        sources,
        dest,
        from,
        chown: flags.chown,
        chmod: flags.chmod,
    })
}

/// The lower-case stage name `AS NAME` gives (Docker's rule: a letter, then letters, digits,
/// `-`, `_` and `.`), or `None` for a name that is not one.
fn stage_alias(name: &str) -> Option<String> {
    let mut chars = name.chars();
    (chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.len() <= 128)
        .then(|| name.to_ascii_lowercase())
}

/// The stage index of `--from=NAME` or `--from=N` among the earlier stages.
fn stage_index(name: &str, names: &[(String, u32)], froms: &[u32]) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    names
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, i)| *i)
        .or_else(|| {
            name.parse::<usize>()
                .ok()
                .and_then(|n| froms.get(n).copied())
        })
}

/// What `FROM IMAGE` (expanded) starts from: an earlier stage by name, an OCI archive, or a
/// template.
fn from_ref(line: u32, image: &str, names: &[(String, u32)]) -> Result<FromRef, FileError> {
    let lower = image.to_ascii_lowercase();
    if let Some((_, i)) = names.iter().find(|(n, _)| *n == lower) {
        return Ok(FromRef::Stage(*i));
    }
    if image == "scratch" {
        return Err(err(
            line,
            "FROM scratch is not supported (start FROM tiny, the smallest template)",
        ));
    }
    Ok(match image.strip_prefix("oci-archive:") {
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
    })
}

/// A `CMD` or `ENTRYPOINT` value.
#[derive(Debug, Clone)]
enum Form {
    Exec(Vec<String>),
    Shell(String),
}

impl Form {
    fn of(expr: &ShellOrExecExpr) -> Form {
        match expr {
            ShellOrExecExpr::Shell(s) => Form::Shell(s.to_string().trim().to_string()),
            ShellOrExecExpr::Exec(a) => {
                Form::Exec(a.elements.iter().map(|e| e.content.clone()).collect())
            }
        }
    }
}

/// The `ENTRYPOINT` and `CMD` of the current stage.
#[derive(Debug, Default)]
struct StartCmd {
    entrypoint: Option<Form>,
    cmd: Option<Form>,
}

impl StartCmd {
    /// The shell command a sandbox starts, combined as Docker combines them: a shell-form
    /// `ENTRYPOINT` alone; an exec-form one followed by `CMD`'s words (a shell-form `CMD` as
    /// `/bin/sh -c CMD`); else `CMD`. Exec forms are quoted and `exec`ed. `None` when empty.
    fn command(&self) -> Option<String> {
        let shell_words = |s: &str| vec!["/bin/sh".to_string(), "-c".into(), s.to_string()];
        let argv = match (&self.entrypoint, &self.cmd) {
            (Some(Form::Shell(s)), _) => return (!s.is_empty()).then(|| s.clone()),
            (Some(Form::Exec(e)), cmd) => {
                let mut argv = e.clone();
                match cmd {
                    Some(Form::Exec(c)) => argv.extend(c.iter().cloned()),
                    Some(Form::Shell(c)) => argv.extend(shell_words(c)),
                    None => {}
                }
                argv
            }
            (None, Some(Form::Shell(s))) => return (!s.is_empty()).then(|| s.clone()),
            (None, Some(Form::Exec(c))) => c.clone(),
            (None, None) => Vec::new(),
        };
        if argv.is_empty() {
            return None;
        }
        let quoted: Vec<String> = argv
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        Some(format!("exec {}", quoted.join(" ")))
    }
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

/// Whether a `COPY` source holds a wildcard (expanded against the context's names).
pub fn is_pattern(src: &str) -> bool {
    src.contains(['*', '?', '['])
}

/// A `COPY` source as a clean path relative to the context root (a wildcard stays for the
/// control plane to expand against the context).
fn context_path(line: u32, src: &str) -> Result<String, FileError> {
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

/// A `COPY --from` source as a clean path relative to the stage's root (`..` stops at the
/// root, as in the stage itself).
fn stage_path(line: u32, src: &str) -> Result<String, FileError> {
    if is_pattern(src) {
        return Err(err(
            line,
            format!(
                "COPY --from source {src}: wildcards are expanded in the build context only \
                 (copy the directory that holds the files)"
            ),
        ));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in src.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
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
                dest: "/srv/app/".into(),
                from: None,
                chown: None,
                chmod: None,
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
        assert_eq!(line("FROM tiny\nRUN\n"), 2);
        assert_eq!(line("FROM tiny\nCOPY --chmod=u+x a /b\n"), 2);
        assert_eq!(line("FROM tiny\nCOPY --parents a /b\n"), 2);
        assert_eq!(line("FROM tiny\nCOPY --link /b\n"), 2);
        assert!(parse_("FROM tiny\nCOPY --link a /b\n").is_ok());
        assert_eq!(line("FROM tiny\nCOPY --from=3 /a /b\n"), 2);
        assert_eq!(line("FROM tiny AS 1x\n"), 1);
        assert_eq!(line("FROM scratch\n"), 1);
        assert_eq!(line("FROM --platform=linux/arm64 tiny\n"), 1);
        assert_eq!(
            line("FROM tiny AS a\nFROM tiny\nCOPY --from=a /x/*.so /b\n"),
            3
        );
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
                dest: "/x/".into(),
                from: None,
                chown: None,
                chmod: None,
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

    fn start_of(f: &TemplateFile) -> Option<String> {
        f.steps.iter().rev().find_map(|s| match &s.step {
            BuildStep::Start { command } => Some(command.clone()),
            _ => None,
        })
    }

    #[test]
    fn cmd_and_entrypoint_become_the_start_command_as_docker_combines_them() {
        let start = |body: &str| start_of(&parse_(&format!("FROM base\n{body}")).expect(body));
        assert_eq!(
            start("CMD [\"python3\", \"-m\", \"http.server\", \"8000\"]\n").as_deref(),
            Some("exec 'python3' '-m' 'http.server' '8000'")
        );
        assert_eq!(
            start("CMD python3 app.py --port $PORT\n").as_deref(),
            Some("python3 app.py --port $PORT")
        );
        assert_eq!(
            start("ENTRYPOINT [\"/entry.sh\"]\nCMD [\"serve\", \"it's\"]\n").as_deref(),
            Some("exec '/entry.sh' 'serve' 'it'\\''s'")
        );
        assert_eq!(
            start("CMD [\"serve\"]\nENTRYPOINT [\"tini\", \"--\"]\n").as_deref(),
            Some("exec 'tini' '--' 'serve'")
        );
        assert_eq!(
            start("ENTRYPOINT [\"env\"]\nCMD echo hi\n").as_deref(),
            Some("exec 'env' '/bin/sh' '-c' 'echo hi'")
        );
        assert_eq!(
            start("ENTRYPOINT exec nginx -g 'daemon off;'\nCMD [\"ignored\"]\n").as_deref(),
            Some("exec nginx -g 'daemon off;'")
        );
        assert_eq!(start("CMD []\n"), None);
        // The quoting survives a real shell.
        let cmd = start("CMD [\"printf\", \"%s|\", \"a b\", \"it's\", \"$HOME\"]\n").expect("cmd");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &cmd])
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|it's|$HOME|");
    }

    #[test]
    fn copy_flags_and_stages() {
        let f = parse_(
            "ARG GO=1.22\nFROM base AS Build\nARG GO\nWORKDIR /src\nCOPY --chown=user:user --chmod=0755 . .\n\
             RUN make\nFROM build AS test\nRUN make test\nFROM tiny\nCOPY --from=build /src/out/app /usr/local/bin/app\n\
             COPY --from=0 /src/../etc/os-release /x\nCOPY --from=other:2 /opt/lib/ /opt/lib/\n\
             COPY --from=other:2 /opt/bin /opt/bin\nADD --chown=1000 --chmod=600 notes.txt /srv/\nCMD [\"app\"]\n",
        )
        .expect("parse");
        assert_eq!(f.stages.len(), 3, "{:#?}", f.stages);
        assert_eq!(
            (
                f.stages[0].name.as_str(),
                &f.stages[0].from,
                f.stages[0].line
            ),
            ("Build", &FromRef::Template("base".into()), 2)
        );
        assert_eq!(f.stages[0].steps.len(), 4);
        assert_eq!(
            f.stages[0].steps[2].step,
            BuildStep::Copy {
                sources: vec![".".into()],
                dest: ".".into(),
                from: None,
                chown: Some("user:user".into()),
                chmod: Some(0o755),
            }
        );
        assert_eq!(
            (f.stages[1].name.as_str(), &f.stages[1].from),
            ("test", &FromRef::Stage(0))
        );
        assert_eq!(
            (
                f.stages[2].name.as_str(),
                &f.stages[2].from,
                f.stages[2].steps.len()
            ),
            ("other:2", &FromRef::Template("other:2".into()), 0)
        );
        assert_eq!(f.from, FromRef::Template("tiny".into()));
        assert_eq!(f.from_line, 9);
        let copies: Vec<(Vec<String>, Option<u32>)> = f
            .steps
            .iter()
            .filter_map(|s| match &s.step {
                BuildStep::Copy { sources, from, .. } => Some((sources.clone(), *from)),
                _ => None,
            })
            .collect();
        assert_eq!(
            copies,
            [
                (vec!["src/out/app".to_string()], Some(0)),
                (vec!["etc/os-release".to_string()], Some(0)),
                (vec!["opt/lib".to_string()], Some(2)),
                (vec!["opt/bin".to_string()], Some(2)),
                (vec!["notes.txt".to_string()], None),
            ]
        );
        assert_eq!(
            f.steps[4].step,
            BuildStep::Copy {
                sources: vec!["notes.txt".into()],
                dest: "/srv/".into(),
                from: None,
                chown: Some("1000".into()),
                chmod: Some(0o600),
            }
        );
        assert_eq!(start_of(&f).as_deref(), Some("exec 'app'"));
        // Wildcards in the context stay for the control plane to expand.
        let f = parse_("FROM base\nCOPY package*.json ./\n").expect("parse");
        assert!(
            matches!(&f.steps[0].step, BuildStep::Copy { sources, .. } if sources == &["package*.json"])
        );
    }
}
