//! Login shells keep the command's `PATH`.
//!
//! `bash -l -c CMD` (what E2B's `commands.run`, `cove exec --shell` and MCP `run_command` run)
//! reads `/etc/profile`, which on Debian sets `PATH` from scratch, so a template's
//! `ENV PATH=/opt/tool/bin:$PATH` would be lost. A non-interactive login bash reads
//! `$BASH_ENV` after its profile files, so such a command gets `BASH_ENV` pointing at
//! [`HOOK`] and the command's `PATH` in [`SAVED_PATH`]; the hook puts back that `PATH`, with
//! what the profiles added to it first (a virtualenv, `~/.local/bin`, as a login shell would
//! prepend them) and `$HOME/.local/bin` (so `pip install --user x && x` works in one call),
//! then removes both variables, so nothing below the shell sees them. A command whose
//! environment sets `BASH_ENV` itself is left alone.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The hook's file name in the run dir.
pub const HOOK: &str = "login-path.sh";
/// The variable carrying the command's `PATH` to the hook.
pub const SAVED_PATH: &str = "COVE_LOGIN_PATH";

const SCRIPT: &str = r#"# Cove: a login shell keeps its command's PATH (see the guest agent's login_path module).
if [ -n "${COVE_LOGIN_PATH+x}" ]; then
  __cove_rest="$PATH:"
  __cove_added=
  while [ -n "$__cove_rest" ]; do
    __cove_d=${__cove_rest%%:*}
    __cove_rest=${__cove_rest#*:}
    case ":$COVE_LOGIN_PATH:$__cove_added:" in
      *":$__cove_d:"*) ;;
      *) __cove_added="$__cove_added${__cove_added:+:}$__cove_d" ;;
    esac
  done
  PATH=$COVE_LOGIN_PATH
  case ":$PATH:$__cove_added:" in
    *":$HOME/.local/bin:"*) ;;
    *) PATH="$HOME/.local/bin:$PATH" ;;
  esac
  [ -n "$__cove_added" ] && PATH="$__cove_added:$PATH"
  export PATH
  unset __cove_rest __cove_added __cove_d COVE_LOGIN_PATH
fi
unset BASH_ENV
"#;

/// Writes the hook into `run_dir` (world-readable: commands run as any user).
///
/// # Errors
/// The write's I/O error.
pub fn install(run_dir: &Path) -> std::io::Result<()> {
    let path = run_dir.join(HOOK);
    let _ = fs::remove_file(&path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)?;
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    f.write_all(SCRIPT.as_bytes())
}

/// Whether `argv` runs a non-interactive login bash (`bash -l …`, `bash --login …`,
/// `bash -lc …`), the shells whose profile resets `PATH`.
pub fn is_login_bash(argv: &[String]) -> bool {
    let Some(cmd) = argv.first() else {
        return false;
    };
    if Path::new(cmd).file_name().and_then(|n| n.to_str()) != Some("bash") {
        return false;
    }
    let mut login = false;
    for a in &argv[1..] {
        match a.as_str() {
            "--login" => login = true,
            "--" | "-" => break,
            s if s.starts_with("--") => {}
            s if s.starts_with('-') => {
                if s.contains('i') {
                    return false;
                }
                login |= s.contains('l');
                if s.contains('c') {
                    break;
                }
            }
            _ => break,
        }
    }
    login
}

/// Adds the hook's variables to a login bash's environment (unless it sets `BASH_ENV`).
pub fn apply(run_dir: &Path, argv: &[String], env: &mut Vec<(String, String)>) {
    if !is_login_bash(argv) || env.iter().any(|(k, _)| k == "BASH_ENV") {
        return;
    }
    let hook: PathBuf = run_dir.join(HOOK);
    if !hook.is_file() {
        return;
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    env.push(("BASH_ENV".into(), hook.to_string_lossy().into_owned()));
    env.push((SAVED_PATH.into(), path));
}

/// `PATH` with `home/.local/bin` first when that directory exists and is not on it yet (as
/// Debian's `~/.profile` does), for every command.
pub fn with_local_bin(env: &mut BTreeMap<String, String>, home: &str) {
    if !home.starts_with('/') {
        return;
    }
    let local = format!("{}/.local/bin", home.trim_end_matches('/'));
    let Some(path) = env.get_mut("PATH") else {
        return;
    };
    if path.split(':').any(|d| d == local) || !Path::new(&local).is_dir() {
        return;
    }
    *path = if path.is_empty() {
        local
    } else {
        format!("{local}:{path}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn login_bash_is_recognised() {
        assert!(is_login_bash(&v(&["/bin/bash", "-l", "-c", "x"])));
        assert!(is_login_bash(&v(&["bash", "-lc", "x"])));
        assert!(is_login_bash(&v(&["/usr/bin/bash", "--login", "-c", "x"])));
        assert!(!is_login_bash(&v(&["/bin/bash", "-c", "x -l"])));
        assert!(!is_login_bash(&v(&["/bin/bash", "-i", "-l"])));
        assert!(!is_login_bash(&v(&["/bin/sh", "-l", "-c", "x"])));
        assert!(!is_login_bash(&v(&["/bin/bash", "script.sh", "-l"])));
    }

    #[test]
    fn the_hook_keeps_the_path_under_a_profile_that_resets_it() {
        let Ok(bash) = which_bash() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "bash is needed for this test"
            );
            return;
        };
        let dir = tempfile::tempdir().expect("tmp");
        install(dir.path()).expect("install");
        // A profile that resets PATH and prepends its own entry, as Debian's plus a venv's.
        let home = dir.path().join("home");
        fs::create_dir(&home).expect("home");
        fs::write(
            home.join(".bash_profile"),
            "PATH=/usr/local/bin:/usr/bin:/bin:/usr/games\nPATH=/venv/bin:$PATH\n",
        )
        .expect("profile");
        let home_s = home.to_string_lossy().into_owned();
        let argv = v(&[
            &bash,
            "-l",
            "-c",
            "echo \"$PATH|${BASH_ENV-unset}|${COVE_LOGIN_PATH-unset}\"",
        ]);
        let mut env = vec![
            ("HOME".to_string(), home_s.clone()),
            (
                "PATH".to_string(),
                "/opt/tool/bin:/usr/bin:/bin".to_string(),
            ),
        ];
        apply(dir.path(), &argv, &mut env);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .output()
            .expect("bash");
        let out = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let path = out.split('|').next().unwrap_or("");
        let entries: Vec<&str> = path.split(':').collect();
        let tool = entries.iter().position(|d| *d == "/opt/tool/bin");
        assert!(tool.is_some(), "{out}");
        assert!(entries.contains(&"/venv/bin"), "{out}");
        assert!(
            entries.contains(&format!("{home_s}/.local/bin").as_str()),
            "{out}"
        );
        assert!(
            tool < entries.iter().position(|d| *d == "/usr/bin"),
            "{out}"
        );
        assert!(out.ends_with("|unset|unset"), "{out}");
    }

    fn which_bash() -> Result<String, ()> {
        ["/bin/bash", "/usr/bin/bash"]
            .iter()
            .find(|p| Path::new(p).is_file())
            .map(|p| p.to_string())
            .ok_or(())
    }
}
