//! The `cove` binary: parse the command line, run the verb, print the error.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cove_cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(cove_cli::run(cli));
    // A blocked read of stdin (`exec --stdin`) must not hold the process open.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
