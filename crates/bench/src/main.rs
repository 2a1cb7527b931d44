//! `cove-bench`: Cove's speed measured side by side with the raw runtime, in one run on one
//! machine. Starts a real server in-process (runc runtime, real guest agents, `tiny` template),
//! measures latencies, throughput, density and concurrency, each beside a baseline of raw runc
//! (or the bare host), prints a table and writes JSON.
//!
//! ```sh
//! scripts/build-guest-agent.sh --release
//! cargo run -p cove-bench --release -- [--quick] [--json out.json] [--only pools,lifecycle]
//! ```
//!
//! Modules: `args` (command line, sizes), `goals` (each row's goal from issues 16 and 30, met or
//! not),
//! `suite` (the run, in order), `measure/` (one file per
//! measurement), `server` (the Cove server under test), `raw/` (the raw runc and runsc
//! baselines), `qemu/` and `gvisor` (`--runtime qemu`, `--runtime gvisor`), `host`
//! (memory and processes from `/proc`), `stats` (percentiles), `report` (table and JSON).

use std::process::ExitCode;

use clap::Parser;

mod args;
mod goals;
mod gvisor;
mod host;
mod measure;
mod qemu;
mod raw;
mod report;
mod server;
mod stats;
mod suite;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cove-bench: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        tokio::select! {
            report = async {
                if args.runtime == "qemu" {
                    qemu::run(&args).await
                } else if args.runtime == "gvisor" {
                    gvisor::run(&args).await
                } else {
                    suite::run(&args).await
                }
            } => report,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    let outcome = result.and_then(|mut report| {
        report.judge();
        print!("{}", report.table());
        report.write_json(&args.json)?;
        eprintln!(
            "cove-bench: {:.0} s; results in {}",
            report.elapsed_s,
            args.json.display()
        );
        Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cove-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
