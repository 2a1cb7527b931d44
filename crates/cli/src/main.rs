//! The `cove` binary: parse the command line, run the verb, print the error.
//!
//! Failures of `cove` itself, bad flags included, exit [`EXIT_COVE_FAILED`] (125), so they never
//! look like the exit code of a command run by `exec` or `run` (see `cove_cli::exit`).

use std::process::ExitCode;

use clap::Parser;
use cove_cli::exit::EXIT_COVE_FAILED;

fn main() -> ExitCode {
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
