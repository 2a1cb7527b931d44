//! `cove-e2e-server`: the real Cove server as its own process, for tests that kill it
//! (`e2e_crash.rs`). Arguments, in order: data dir, API address, data-plane address, guest
//! agent binary, release cache dir, controller and reconcile intervals in milliseconds. Logs go
//! to stderr. `COVE_E2E_RUNTIME=qemu` picks the qemu runtime.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: cove-e2e-server DATA_DIR API_ADDR DATA_PLANE_ADDR AGENT CACHE_DIR \
                     CONTROLLER_MS RECONCILE_MS";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [data_dir, listen, data_plane, agent, cache, controller_ms, reconcile_ms] = args.as_slice()
    else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let parsed = (
        listen.parse(),
        data_plane.parse(),
        controller_ms.parse::<u64>(),
        reconcile_ms.parse::<u64>(),
    );
    let (Ok(listen), Ok(data_plane_listen), Ok(controller_ms), Ok(reconcile_ms)) = parsed else {
        eprintln!("bad address or interval; {USAGE}");
        return ExitCode::from(2);
    };
    let cfg = cove_server::Config {
        data_dir: PathBuf::from(data_dir),
        store: None,
        listen,
        data_plane_listen,
        guest_agent: Some(PathBuf::from(agent)),
        cache_dir: Some(PathBuf::from(cache)),
        runc: None,
        // The runtime from COVE_E2E_RUNTIME (`runc` when unset), for the qemu tests.
        runtime: std::env::var("COVE_E2E_RUNTIME")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or_default(),
        public_data_plane_url: None,
        lifecycle: cove_server::LifecycleSettings {
            controller_interval: Some(Duration::from_millis(controller_ms)),
            reconcile_interval: Some(Duration::from_millis(reconcile_ms)),
            ..Default::default()
        },
        command_output: Default::default(),
        e2b: None,
        network: Default::default(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    cove_server::init_tracing();
    match runtime.block_on(cove_server::run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
