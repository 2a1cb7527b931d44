//! The `cove` binary: parse the command line, run the verb, print the error.
//!
//! Failures of `cove` itself, bad flags included, exit [`EXIT_COVE_FAILED`] (125), so they never
//! look like the exit code of a command run by `exec` or `run` (see `cove_cli::exit`).

use std::process::ExitCode;

use clap::Parser;
use cove_cli::exit::EXIT_COVE_FAILED;

fn main() -> ExitCode {
    quiet_closed_output();
    let cli = match cove_cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are not failures; clap prints them itself.
            let code = if err.use_stderr() {
                EXIT_COVE_FAILED
            } else {
                0
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_COVE_FAILED);
        }
    };
    let result = runtime.block_on(cove_cli::run(cli));
    // A blocked read of stdin (`exec --stdin`) must not hold the process open.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_COVE_FAILED)
        }
    }
}

/// A last guard for "no panic on a closed pipe": every verb prints through
/// `cove_cli::output`, which exits quietly when the reader left; should any other print to a
/// closed stdout or stderr slip through (std's print macros panic there), the process ends the
/// same way (exit 141) instead of reporting a panic.
fn quiet_closed_output() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") {
            std::process::exit(i32::from(cove_cli::exit::EXIT_BROKEN_PIPE));
        }
        default(info);
    }));
}
