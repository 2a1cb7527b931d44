//! `cove-guest-agent`: see the library's documentation.

use std::io::IsTerminal;
use std::process::ExitCode;

use cove_guest_agent::config::USAGE;
use cove_guest_agent::{parse_args, Invocation};

fn main() -> ExitCode {
    cove_guest_agent::stdio::ensure_standard_fds();
    let vport = cove_guest_agent::vport::take_port_from_env();
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(Invocation::Run(c)) => c,
        Ok(Invocation::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Version) => {
            println!("cove-guest-agent {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("cove-guest-agent: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    // One thread serves every connection and command stream; blocking work (files, spawns,
    // process-tree scans) goes to the blocking pool. Each extra worker cost the idle agent a
    // stack, a malloc arena and its wake-ups (see docs/performance.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        // Idle blocking threads stay around: when a fork bomb exhausts the sandbox's process
        // limit, no new thread can be created, but file and spawn requests still find one.
        .thread_keep_alive(std::time::Duration::from_secs(3600))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cove-guest-agent: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(port) = vport {
        runtime.spawn(cove_guest_agent::vport::serve(port, config.listen.clone()));
    }
    match runtime.block_on(cove_guest_agent::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "guest agent failed");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `COVE_LOG` (`level` or `target=level`, comma-separated; `info`
/// when unset or unparsable). `Targets` rather than `EnvFilter`: the agent leaves out the
/// regex engine `EnvFilter` brings, which was a large share of its resident code.
fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = std::env::var("COVE_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish()
        .with(filter)
        .init();
}
