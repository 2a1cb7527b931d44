//! `Spawn`: validate a request, start the process, register the command.
//!
//! The environment starts empty: `HOME`, `USER`, `LOGNAME`, `SHELL` from the user's passwd entry,
//! `PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`, `LANG=C.UTF-8`, then the
//! request's variables over them (and `TERM=xterm-256color` on a terminal unless the request
//! sets `TERM`), and `$HOME/.local/bin` first on `PATH` when that directory exists. A shell
//! command runs as `/bin/bash -l -c <s>` (or `/bin/sh -c <s>` without bash); one longer than
//! [`MAX_INLINE_SCRIPT`] is written to a file in the run dir and sourced (`. <file>`), since
//! Linux limits one argument to 128 KiB. A login bash keeps the command's `PATH` through its
//! profile ([`super::login_path`]).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cove_guest_protocol::{CommandInfo, ErrorCode, Program, SpawnRequest, Stream};
use parking_lot::Mutex;
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::supervise::Source;
use super::{now_ms, supervise, Command, Status, Stdin, StdinWriter};
use crate::command_cgroup::CommandCgroup;
use crate::error::AgentError;
use crate::files::path::{display, resolve};
use crate::output_log::{LogLimits, OutputLog};
use crate::pty::PtyMaster;
use crate::spawn::{spawn, SpawnError, SpawnSpec, Spawned, SpawnedIo, Stage};
use crate::state::Agent;
use crate::users::User;

/// Shell commands longer than this (bytes) run from a script file (Linux's limit for one
/// argument, `MAX_ARG_STRLEN`, is 128 KiB).
pub const MAX_INLINE_SCRIPT: usize = 100 * 1024;

/// `PATH` of every command unless the request sets one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Longest command id (it names the spill file).
const MAX_ID_BYTES: usize = 128;

/// What the blocking part hands back.
struct Started {
    spawned: Spawned,
    spec: SpawnSpec,
    user: String,
    script: Option<PathBuf>,
    cgroup: Option<CommandCgroup>,
}

/// Starts a command; returns its state just after the start (the leader's pid, running).
pub async fn start(agent: &Arc<Agent>, req: SpawnRequest) -> Result<CommandInfo, AgentError> {
    validate_id(&req.command_id)?;
    let reservation = agent.commands.reserve(&req.command_id)?;
    let timeout = req.timeout_ms.map(Duration::from_millis);
    let id = req.command_id.clone();
    let oom_kills_at_start = crate::oom::kills();
    let a = agent.clone();
    let started = tokio::task::spawn_blocking(move || prepare_and_spawn(&a, req))
        .await
        .map_err(|e| AgentError::internal(format!("spawn task failed: {e}")))??;
    let Started {
        spawned,
        spec,
        user,
        script,
        cgroup,
    } = started;
    let cgroup = cgroup.map(Arc::new);

    let limits = LogLimits {
        memory_bytes: agent.config.output_memory_bytes,
        cap_bytes: agent.config.output_cap_bytes,
        tail_bytes: agent.config.output_tail_bytes,
    };
    let log = OutputLog::new(agent.output_dir().join(&id), limits);
    let pid = spawned.pid;
    let registered = (|| match spawned.io {
        SpawnedIo::Pipes {
            stdin,
            stdout,
            stderr,
        } => {
            let stdin = stdin.map(pipe::Sender::from_owned_fd).transpose()?;
            let stdout = pipe::Receiver::from_owned_fd(stdout)?;
            let stderr = pipe::Receiver::from_owned_fd(stderr)?;
            Ok::<_, std::io::Error>((
                stdin.map(StdinWriter::Pipe),
                vec![
                    Source::Pipe(stdout, Stream::Stdout),
                    Source::Pipe(stderr, Stream::Stderr),
                ],
                None,
            ))
        }
        SpawnedIo::Pty { master } => {
            let master = Arc::new(PtyMaster::new(master)?);
            Ok((
                Some(StdinWriter::Pty(master.clone())),
                vec![Source::Pty(master.clone())],
                Some(master),
            ))
        }
    })();
    let (stdin, sources, pty) = match registered {
        Ok(p) => p,
        Err(e) => {
            // Nothing could supervise the process: end it rather than leave it unmanaged.
            crate::process_tree::signal_tree(pid, libc::SIGKILL);
            if let Some(cg) = &cgroup {
                cg.kill_frozen();
            }
            if let Some(s) = &script {
                let _ = fs::remove_file(s);
            }
            return Err(AgentError::new(
                ErrorCode::SpawnFailed,
                format!("registering the process's pipes: {e}"),
            ));
        }
    };
    let command = Arc::new(Command {
        id,
        pid,
        argv: spec.argv,
        user,
        cwd: spec.cwd.to_string_lossy().into_owned(),
        started_at_ms: now_ms(),
        log: Mutex::new(log),
        status: Mutex::new(Status::default()),
        progress: watch::channel(false).0,
        stdin: Stdin::new(stdin),
        killing: AtomicBool::new(false),
        tree_gone: AtomicBool::new(false),
        script,
        pty,
        oom_kills_at_start,
        cgroup,
    });
    let info = command.info();
    reservation.commit(command.clone());
    tokio::spawn(supervise::supervise(
        command,
        spawned.exit,
        sources,
        timeout,
    ));
    Ok(info)
}

fn validate_id(id: &str) -> Result<(), AgentError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AgentError::invalid(format!(
            "command id {id:?} must be 1-{MAX_ID_BYTES} characters of [A-Za-z0-9._-], not starting with '.'"
        )))
    }
}

/// Validates the request and starts the process (blocking: reads /etc, stats, forks).
fn prepare_and_spawn(agent: &Agent, req: SpawnRequest) -> Result<Started, AgentError> {
    let db = agent.users.load();
    let user = db.resolve(req.user.as_deref())?;
    let mut env = build_env(&user, &req.env)?;
    if req.pty.is_some() && !req.env.contains_key("TERM") {
        env.push(("TERM".into(), "xterm-256color".into()));
    }
    if let Some(size) = req.pty {
        if size.cols == 0 || size.rows == 0 {
            return Err(AgentError::invalid(format!(
                "terminal size {}x{} must be at least 1x1",
                size.cols, size.rows
            )));
        }
    }
    let cwd = working_dir(&user, req.cwd.as_ref())?;
    let (argv, script) = program_argv(agent, &req.command_id, req.program)?;
    super::login_path::apply(&agent.config.run_dir, &argv, &mut env);
    let spec = SpawnSpec {
        argv,
        env,
        cwd,
        uid: user.uid,
        gid: user.gid,
        groups: db.groups_of(&user),
        stdin_pipe: req.stdin,
        pty: req.pty,
    };
    let cleanup = |cgroup: Option<&CommandCgroup>| {
        if let Some(s) = &script {
            let _ = fs::remove_file(s);
        }
        if let Some(cg) = cgroup {
            cg.remove();
        }
    };
    let cgroup = match agent.cgroups.create(&req.command_id) {
        Ok(cg) => cg,
        Err(e) => {
            cleanup(None);
            return Err(AgentError::new(
                ErrorCode::SpawnFailed,
                format!("creating the command's cgroup: {e}"),
            ));
        }
    };
    let join = match cgroup.as_ref().map(CommandCgroup::join_files).transpose() {
        Ok(files) => files.unwrap_or_default(),
        Err(e) => {
            cleanup(cgroup.as_ref());
            return Err(AgentError::new(
                ErrorCode::SpawnFailed,
                format!("opening the command's cgroup: {e}"),
            ));
        }
    };
    match spawn(&spec, &agent.reaper, &join) {
        Ok(spawned) => Ok(Started {
            spawned,
            spec,
            user: user.name,
            script,
            cgroup,
        }),
        Err(e) => {
            cleanup(cgroup.as_ref());
            Err(spawn_error(e, &user, &spec.cwd))
        }
    }
}

fn spawn_error(e: SpawnError, user: &User, cwd: &Path) -> AgentError {
    match e {
        SpawnError::Nul(_) | SpawnError::EmptyArgv => AgentError::invalid(e.to_string()),
        SpawnError::Setup {
            stage: Stage::Chdir,
            source,
        } => AgentError::new(
            crate::error::code_for_io(&source),
            format!(
                "user {} cannot enter working directory {}: {}",
                user.name,
                display(cwd),
                crate::error::describe(&source)
            ),
        ),
        SpawnError::Setup {
            stage: Stage::Identity,
            ..
        } => AgentError::new(
            ErrorCode::SpawnFailed,
            format!("switching to user {}: {e}", user.name),
        ),
        SpawnError::Prepare(_) | SpawnError::Fork(_) | SpawnError::Setup { .. } => {
            AgentError::new(ErrorCode::SpawnFailed, e.to_string())
        }
    }
}

/// The environment of a command.
pub fn build_env(
    user: &User,
    extra: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, AgentError> {
    for (name, value) in extra {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(AgentError::invalid(format!(
                "invalid environment variable name {name:?}: it must be non-empty without '=' or NUL"
            )));
        }
        if value.contains('\0') {
            return Err(AgentError::invalid(format!(
                "environment variable {name:?} contains a NUL byte"
            )));
        }
    }
    let shell = if user.shell.is_empty() {
        "/bin/sh"
    } else {
        user.shell.as_str()
    };
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("HOME".into(), user.home.clone());
    env.insert("USER".into(), user.name.clone());
    env.insert("LOGNAME".into(), user.name.clone());
    env.insert("SHELL".into(), shell.into());
    env.insert("PATH".into(), DEFAULT_PATH.into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(home) = env.get("HOME").cloned() {
        super::login_path::with_local_bin(&mut env, &home);
    }
    Ok(env.into_iter().collect())
}

/// The checked working directory: the given one must exist and be a directory (`NotFound` /
/// `WrongType` naming it); without one, the user's home, or `/` when the home does not exist.
fn working_dir(
    user: &User,
    cwd: Option<&cove_guest_protocol::GuestPath>,
) -> Result<PathBuf, AgentError> {
    let Some(cwd) = cwd else {
        let home = user.home_path();
        return Ok(if home.is_absolute() && home.is_dir() {
            home.to_path_buf()
        } else {
            "/".into()
        });
    };
    let path = resolve(cwd, user.home_path())?;
    match fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(path),
        Ok(_) => Err(AgentError::new(
            ErrorCode::WrongType,
            format!("working directory {} is not a directory", display(&path)),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(AgentError::not_found(format!(
            "working directory {} does not exist",
            display(&path)
        ))),
        Err(e) => Err(AgentError::io("working directory", &path, &e)),
    }
}

/// The argv to execute, and the script file of a long shell command.
fn program_argv(
    agent: &Agent,
    id: &str,
    program: Program,
) -> Result<(Vec<String>, Option<PathBuf>), AgentError> {
    match program {
        Program::Argv(argv) => {
            if argv.is_empty() {
                return Err(AgentError::invalid("argv is empty"));
            }
            if argv[0].is_empty() {
                return Err(AgentError::invalid("argv[0] is empty"));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(AgentError::invalid("an argument contains a NUL byte"));
            }
            Ok((argv, None))
        }
        Program::Shell(script) => {
            if script.contains('\0') {
                return Err(AgentError::invalid("the shell command contains a NUL byte"));
            }
            let bash = Path::new("/bin/bash").exists();
            let mut argv: Vec<String> = if bash {
                vec!["/bin/bash".into(), "-l".into(), "-c".into()]
            } else {
                vec!["/bin/sh".into(), "-c".into()]
            };
            if script.len() <= MAX_INLINE_SCRIPT {
                argv.push(script);
                return Ok((argv, None));
            }
            let path = write_script(&agent.scripts_dir(), id, &script)?;
            argv.push(format!(". {}", shell_quote(&path.to_string_lossy())));
            Ok((argv, Some(path)))
        }
    }
}

fn write_script(dir: &Path, id: &str, script: &str) -> Result<PathBuf, AgentError> {
    let path = dir.join(format!("{id}.sh"));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)?;
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        f.write_all(script.as_bytes())
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&path);
        AgentError::new(
            ErrorCode::SpawnFailed,
            format!("writing the command's script: {e}"),
        )
    })?;
    Ok(path)
}

/// Quotes a string for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            shell: "".into(),
        }
    }

    #[test]
    fn env_defaults_and_overrides() {
        let mut extra = BTreeMap::new();
        extra.insert("PATH".to_string(), "/x".to_string());
        extra.insert(
            "TRICKY".to_string(),
            " a b'c\"d$HOME`x`\nline2 ".to_string(),
        );
        let env: BTreeMap<_, _> = build_env(&user(), &extra)
            .expect("env")
            .into_iter()
            .collect();
        assert_eq!(env["HOME"], "/home/user");
        assert_eq!(env["USER"], "user");
        assert_eq!(env["LOGNAME"], "user");
        assert_eq!(env["SHELL"], "/bin/sh");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["PATH"], "/x");
        assert_eq!(env["TRICKY"], " a b'c\"d$HOME`x`\nline2 ");
    }

    #[test]
    fn env_rejects_bad_names() {
        for bad in ["", "A=B", "A\0"] {
            let mut extra = BTreeMap::new();
            extra.insert(bad.to_string(), "x".to_string());
            let err = build_env(&user(), &extra).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn ids_and_quoting() {
        assert!(validate_id("cmd_01-a.b").is_ok());
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(129)] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
        assert_eq!(shell_quote("/a/it's"), r"'/a/it'\''s'");
    }
}
