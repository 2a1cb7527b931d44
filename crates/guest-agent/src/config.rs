//! Command-line configuration of the agent, parsed once in `main`.

use std::path::PathBuf;

use cove_guest_protocol::GUEST_RUN_DIR;

/// Default bytes of one command's output kept in memory before it spills to the run dir (1 MiB).
pub const DEFAULT_OUTPUT_MEMORY_BYTES: usize = 1 << 20;

/// Default bytes of one command's output kept at most (1 GiB): the first half and the last
/// half ([`DEFAULT_OUTPUT_CAP_BYTES`] − tail); the middle of a longer output is dropped and the
/// command reports `truncated`.
pub const DEFAULT_OUTPUT_CAP_BYTES: u64 = 1 << 30;

/// The agent's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Unix socket path to listen on (`--listen`, required).
    pub listen: PathBuf,
    /// Directory for the agent's own state (`--run-dir`, default [`GUEST_RUN_DIR`]): spilled
    /// output in `output/`, large scripts in `scripts/`. It is backed by the node, not by the
    /// sandbox's disk.
    pub run_dir: PathBuf,
    /// Bytes of one command's output kept in memory before spilling (`--output-memory-bytes`).
    pub output_memory_bytes: usize,
    /// Bytes of one command's output kept at most (`--output-cap-bytes`): the first
    /// `cap − tail` bytes and the last `tail` bytes; the middle of a longer output is dropped for
    /// every reader and the command reports `truncated`.
    pub output_cap_bytes: u64,
    /// Bytes at the end of one command's output that are always kept (`--output-tail-bytes`,
    /// default half the cap, at most the cap).
    pub output_tail_bytes: u64,
    /// Quiesce on [`QUIESCE_SIGNAL`] and listen again on [`RELISTEN_SIGNAL`]
    /// (`--quiesce-on-signal`; gVisor's checkpoints, see [`crate::agent`]).
    ///
    /// [`QUIESCE_SIGNAL`]: cove_guest_protocol::QUIESCE_SIGNAL
    /// [`RELISTEN_SIGNAL`]: cove_guest_protocol::RELISTEN_SIGNAL
    pub quiesce_on_signal: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Invocation {
    /// Run the agent.
    Run(Config),
    /// Print usage and exit.
    Help,
    /// Print the version and exit.
    Version,
}

/// Usage text printed by `--help`.
pub const USAGE: &str = "\
usage: cove-guest-agent --listen PATH [options]

options:
  --listen PATH                 unix socket to listen on (required)
  --run-dir DIR                 directory for the agent's state (default /.cove/run)
  --output-memory-bytes N       output bytes per command kept in memory before spilling
                                to DIR/output (default 1048576)
  --output-cap-bytes N          output bytes per command kept at most: the first cap-tail
                                bytes and the last tail bytes; the middle of a longer output
                                is dropped and the command is marked truncated (default
                                1073741824)
  --output-tail-bytes N         the rolling tail kept of a longer output (default: cap/2)
  --quiesce-on-signal           on SIGUSR1 close the socket and every connection (commands
                                keep running), on SIGUSR2 listen again
  --help, --version
";

/// Parses the arguments (without the program name). The error is a message for the user.
pub fn parse_args<I>(args: I) -> Result<Invocation, String>
where
    I: IntoIterator<Item = String>,
{
    let mut listen = None;
    let mut run_dir = PathBuf::from(GUEST_RUN_DIR);
    let mut output_memory_bytes = DEFAULT_OUTPUT_MEMORY_BYTES;
    let mut output_cap_bytes = DEFAULT_OUTPUT_CAP_BYTES;
    let mut output_tail_bytes = None;
    let mut quiesce_on_signal = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args.next().ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match flag.as_str() {
            "--help" | "-h" => return Ok(Invocation::Help),
            "--version" | "-V" => return Ok(Invocation::Version),
            "--listen" => listen = Some(PathBuf::from(value("--listen")?)),
            "--run-dir" => run_dir = PathBuf::from(value("--run-dir")?),
            cove_guest_protocol::QUIESCE_FLAG if inline.is_none() => quiesce_on_signal = true,
            "--output-memory-bytes" => {
                let v = value("--output-memory-bytes")?;
                output_memory_bytes = v
                    .parse()
                    .map_err(|_| format!("--output-memory-bytes: bad number {v:?}"))?;
            }
            "--output-cap-bytes" => {
                let v = value("--output-cap-bytes")?;
                output_cap_bytes = v
                    .parse()
                    .map_err(|_| format!("--output-cap-bytes: bad number {v:?}"))?;
            }
            "--output-tail-bytes" => {
                let v = value("--output-tail-bytes")?;
                output_tail_bytes = Some(
                    v.parse()
                        .map_err(|_| format!("--output-tail-bytes: bad number {v:?}"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let listen = listen.ok_or_else(|| "--listen is required".to_string())?;
    let output_tail_bytes = output_tail_bytes
        .unwrap_or(output_cap_bytes / 2)
        .min(output_cap_bytes);
    Ok(Invocation::Run(Config {
        listen,
        run_dir,
        output_memory_bytes,
        output_cap_bytes,
        output_tail_bytes,
        quiesce_on_signal,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Invocation, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_overrides() {
        let Ok(Invocation::Run(c)) = parse(&["--listen", "/s.sock"]) else {
            panic!("parse")
        };
        assert_eq!(c.listen, PathBuf::from("/s.sock"));
        assert_eq!(c.run_dir, PathBuf::from(GUEST_RUN_DIR));
        assert_eq!(c.output_memory_bytes, DEFAULT_OUTPUT_MEMORY_BYTES);
        assert_eq!(c.output_cap_bytes, DEFAULT_OUTPUT_CAP_BYTES);
        assert_eq!(c.output_tail_bytes, DEFAULT_OUTPUT_CAP_BYTES / 2);
        assert!(!c.quiesce_on_signal);
        let Ok(Invocation::Run(c)) = parse(&["--listen", "/s.sock", "--quiesce-on-signal"]) else {
            panic!("parse")
        };
        assert!(c.quiesce_on_signal);
        let Ok(Invocation::Run(c)) = parse(&[
            "--listen=/a",
            "--run-dir",
            "/r",
            "--output-memory-bytes",
            "10",
            "--output-cap-bytes=20",
        ]) else {
            panic!("parse")
        };
        assert_eq!(c.run_dir, PathBuf::from("/r"));
        assert_eq!((c.output_memory_bytes, c.output_cap_bytes), (10, 20));
        assert_eq!(c.output_tail_bytes, 10);
        let Ok(Invocation::Run(c)) = parse(&[
            "--listen=/a",
            "--output-cap-bytes=20",
            "--output-tail-bytes=50",
        ]) else {
            panic!("parse")
        };
        assert_eq!(c.output_tail_bytes, 20, "the tail is at most the cap");
    }

    #[test]
    fn errors() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["--listen"]).is_err());
        assert!(parse(&["--listen", "/a", "--bogus"]).is_err());
        assert!(parse(&["--listen", "/a", "--output-cap-bytes", "x"]).is_err());
        assert!(parse(&["--listen", "/a", "--quiesce-on-signal=1"]).is_err());
        assert_eq!(parse(&["--help"]), Ok(Invocation::Help));
    }
}
