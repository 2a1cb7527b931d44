//! `ip` and `nft` invocations, and running code inside a named network namespace.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ipnet::Ipv4Net;
use nix::sched::CloneFlags;

use crate::error::{NetworkError, Result};

/// The file of a named network namespace.
pub fn netns_path(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

/// Runs `program args...`, feeding `stdin` when given. Errors: [`NetworkError::Command`] with the
/// command's stderr when it exits non-zero.
pub(crate) fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let line = || format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NetworkError::io(format!("spawning {program}"), e))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .map_err(|e| NetworkError::io(format!("writing to {program}"), e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NetworkError::io(format!("waiting for {program}"), e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(NetworkError::Command {
            command: line(),
            stderr,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip [-n ns] -batch -` with one command per line.
pub(crate) fn ip_batch(ns: Option<&str>, lines: &str) -> Result<()> {
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-batch", "-"]);
    run("ip", &args, Some(lines)).map(drop)
}

/// `ip netns exec ns nft -f -` with the given script.
pub(crate) fn nft(ns: &str, script: &str) -> Result<()> {
    run("ip", &["netns", "exec", ns, "nft", "-f", "-"], Some(script)).map(drop)
}

fn ip_json(ns: Option<&str>, args: &[&str]) -> Result<serde_json::Value> {
    let mut full = vec!["-j"];
    if let Some(ns) = ns {
        full.extend(["-n", ns]);
    }
    full.extend_from_slice(args);
    let out = run("ip", &full, None)?;
    if out.trim().is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_str(&out).map_err(|e| NetworkError::Command {
        command: format!("ip {}", full.join(" ")),
        stderr: format!("unparsable output: {e}"),
    })
}

/// The IPv4 route destinations of a namespace (`None` = this process's), `default` as 0.0.0.0/0.
pub fn routes(ns: Option<&str>) -> Result<Vec<Ipv4Net>> {
    let v = ip_json(ns, &["-4", "route", "show", "table", "all"])?;
    let mut out = Vec::new();
    for r in v.as_array().into_iter().flatten() {
        let Some(dst) = r.get("dst").and_then(|d| d.as_str()) else {
            continue;
        };
        if r.get("type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| t != "unicast")
        {
            continue;
        }
        let net = match dst {
            "default" => Some(Ipv4Net::default()),
            s => s
                .parse::<Ipv4Net>()
                .ok()
                .or_else(|| s.parse::<Ipv4Addr>().ok().map(Ipv4Net::from)),
        };
        out.extend(net);
    }
    Ok(out)
}

/// The IPv4 addresses on the interfaces of a namespace (`None` = this process's).
pub fn addresses(ns: Option<&str>) -> Result<Vec<Ipv4Addr>> {
    let v = ip_json(ns, &["-4", "addr", "show"])?;
    let mut out = Vec::new();
    for link in v.as_array().into_iter().flatten() {
        for a in link
            .get("addr_info")
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(ip) = a
                .get("local")
                .and_then(|l| l.as_str())
                .and_then(|s| s.parse().ok())
            {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

/// Link names in a namespace.
pub fn links(ns: Option<&str>) -> Result<Vec<String>> {
    let v = ip_json(ns, &["link", "show"])?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("ifname").and_then(|n| n.as_str()).map(str::to_string))
        .collect())
}

/// Named network namespaces (`ip netns list`).
pub fn netns_names() -> Result<Vec<String>> {
    let dir = match std::fs::read_dir("/run/netns") {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(NetworkError::io("listing /run/netns", e)),
    };
    Ok(dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// Runs `f` on a new thread that has entered the named network namespace, and returns its result.
/// Sockets made by `f` belong to that namespace for their whole life, whichever thread later uses
/// them. Errors: [`NetworkError::Setns`] when the namespace cannot be entered.
pub fn run_in_netns<T, F>(name: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let path = netns_path(name);
    std::thread::Builder::new()
        .name("cove-netns".into())
        .spawn(move || {
            enter_netns(&path)?;
            Ok(f())
        })
        .map_err(|e| NetworkError::io("spawning a namespace thread", e))?
        .join()
        .map_err(|_| NetworkError::io("namespace thread", std::io::Error::other("panicked")))?
}

/// Moves the calling thread into a network namespace file.
pub(crate) fn enter_netns(path: &std::path::Path) -> Result<()> {
    let file =
        File::open(path).map_err(|e| NetworkError::io(format!("opening {}", path.display()), e))?;
    nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(|source| NetworkError::Setns {
        path: path.to_path_buf(),
        source,
    })
}
