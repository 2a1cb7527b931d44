//! `cove-e2e-server`: the real Cove server as its own process, for tests that kill it
//! (`e2e_crash.rs`). Arguments, in order: data dir, API address, data-plane address, guest
//! agent binary, release cache dir, controller and reconcile intervals in milliseconds. Logs go
//! to stderr. `COVE_E2E_RUNTIME=qemu` picks the qemu runtime; `COVE_E2E_UPSTREAM_NS` (see
//! `network_from_env`) points the sandbox network's gateway at a fake internet.
//! `COVE_E2E_AGENT_CHECK_MS` sets how often guest agents are checked (default 5000);
//! `COVE_E2E_DEFAULT_DISK_MIB=0` gives sandboxes no own disk (their files on the data dir).
//! `COVE_E2E_USER_NAMESPACES=off` runs sandboxes without user namespaces.
//! `COVE_E2E_KEEP_NETWORK_ON_STOP` (any value) is `cove server --keep-network-on-stop`,
//! `COVE_E2E_SANDBOX_CA_FILE` its `--sandbox-ca-file` and `COVE_E2E_UPSTREAM_PROXY` its
//! `--upstream-proxy`.
//! `COVE_E2E_SNAPSHOT_STORE` is the snapshot store URL (`s3://...` with the `AWS_*` settings in
//! the environment, as `cove server --snapshot-store` takes them).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: cove-e2e-server DATA_DIR API_ADDR DATA_PLANE_ADDR AGENT CACHE_DIR \
                     CONTROLLER_MS RECONCILE_MS";

/// The gateway's upstream from `COVE_E2E_UPSTREAM_NS` (a namespace standing for the host),
/// `COVE_E2E_RESOLVER` (`ip:port`) and `COVE_E2E_TLS_ROOTS` (a PEM file), when set: a fake
/// internet for tests. Sandbox addresses then come from `COVE_E2E_POOL` (default
/// `cove_network::lab::lab_pool()`, the fake internet's pool chosen at run time).
fn network_from_env() -> cove_server::NetworkSettings {
    let Ok(netns) = std::env::var("COVE_E2E_UPSTREAM_NS") else {
        return Default::default();
    };
    let resolver = std::env::var("COVE_E2E_RESOLVER")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| std::net::SocketAddrV4::new(cove_network::lab::DNS_ADDR.ip(), 53));
    let tls_roots_pem = std::env::var("COVE_E2E_TLS_ROOTS")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok());
    cove_server::NetworkSettings {
        mode: cove_server::NetworkMode::On,
        prefix: std::env::var("COVE_E2E_NETWORK_PREFIX").ok(),
        pool: match std::env::var("COVE_E2E_POOL") {
            Ok(p) => p.parse().ok(),
            Err(_) => Some(cove_network::lab::lab_pool()),
        },
        upstream: Some(cove_network::Upstream {
            netns: Some(netns),
            resolver,
            tls_roots_pem,
        }),
        ..Default::default()
    }
}

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
        layer_cache_mib: None,
        runc: None,
        gvisor: Default::default(),
        // The runtime from COVE_E2E_RUNTIME (`runc` when unset), for the qemu tests.
        runtime: std::env::var("COVE_E2E_RUNTIME")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or_default(),
        public_data_plane_url: None,
        lifecycle: cove_server::LifecycleSettings {
            controller_interval: Some(Duration::from_millis(controller_ms)),
            reconcile_interval: Some(Duration::from_millis(reconcile_ms)),
            agent_check_interval: std::env::var("COVE_E2E_AGENT_CHECK_MS")
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis),
            snapshot_store: std::env::var("COVE_E2E_SNAPSHOT_STORE").ok(),
            ..Default::default()
        },
        command_output: Default::default(),
        e2b: std::env::var("COVE_E2E_E2B_LISTEN")
            .ok()
            .and_then(|a| a.parse().ok())
            .map(|listen| cove_server::E2bSettings {
                listen,
                domain: std::env::var("COVE_E2E_E2B_DOMAIN").ok(),
                tls: std::env::var("COVE_E2E_E2B_TLS_CERT")
                    .ok()
                    .zip(std::env::var("COVE_E2E_E2B_TLS_KEY").ok())
                    .map(|(cert, key)| cove_server::tls::TlsFiles {
                        cert: PathBuf::from(cert),
                        key: PathBuf::from(key),
                    }),
            }),
        proxy: None,
        network: cove_server::NetworkSettings {
            keep_on_stop: std::env::var("COVE_E2E_KEEP_NETWORK_ON_STOP").is_ok(),
            sandbox_ca_file: std::env::var("COVE_E2E_SANDBOX_CA_FILE")
                .ok()
                .map(PathBuf::from),
            upstream_proxy: std::env::var("COVE_E2E_UPSTREAM_PROXY")
                .ok()
                .and_then(|u| u.parse().ok()),
            ..network_from_env()
        },
        default_disk_mib: match std::env::var("COVE_E2E_DEFAULT_DISK_MIB")
            .ok()
            .and_then(|m| m.parse::<u64>().ok())
        {
            Some(0) => None,
            Some(mib) => Some(mib),
            None => Some(cove_server::DEFAULT_DISK_MIB),
        },
        cluster: None,
        user_namespaces: cove_server::UserNamespaceSettings {
            enabled: std::env::var("COVE_E2E_USER_NAMESPACES").as_deref() != Ok("off"),
            ..Default::default()
        },
        oci_import: Default::default(),
        listen_limits: Default::default(),
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
