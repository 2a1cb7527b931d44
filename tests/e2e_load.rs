//! Issue 12, load: a mixed workload against one server (its own process, so its memory is its
//! own): creates, commands with output (checked byte for byte), uploads and downloads
//! (checked), pause/resume, suspend/wake (files checked after each wake), deletes. Asserts no
//! 5xx and no failure of any kind, and the server's peak resident memory (`VmHWM`) stays
//! under a bound; prints the figures.
//!
//! Size: `COVE_LOAD_CLIENTS` clients for `COVE_LOAD_SECS` seconds. The figure is 50
//! clients for 60 s; the defaults here (16 × 30 s) keep the test under 90 s on a 2-core
//! machine. `COVE_LOAD_MAX_RSS_MIB` sets the memory bound (default 512 MiB).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cove_e2e::load::{env_or, memory_kib, LoadClient, Stats};
use cove_e2e::server_process::ServerProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_load_has_no_server_errors_exact_outputs_and_bounded_memory() {
    let clients = env_or("COVE_LOAD_CLIENTS", 16) as usize;
    let secs = env_or("COVE_LOAD_SECS", 30);
    let max_rss_mib = env_or("COVE_LOAD_MAX_RSS_MIB", 512);
    let mut server = ServerProcess::new(Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")), 30_000);
    let c = server.start().await;
    let pid = server.pid().expect("server pid");
    cove_e2e::build_template(&c, "tiny").await;
    let (hwm_before, _) = memory_kib(pid).expect("server memory");

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|no| {
            let client = LoadClient::new(c.clone(), no, "tiny", until, stop.clone(), stats.clone());
            tokio::spawn(client.run())
        })
        .collect();
    // Resident memory sampled every second while the load runs.
    let mut peak_rss = 0;
    let mut samples = 0;
    let limit = until + Duration::from_secs(240);
    while tasks.iter().any(|t| !t.is_finished()) {
        assert!(
            Instant::now() < limit,
            "the load did not finish: {}",
            stats.summary()
        );
        if let Some((_, rss)) = memory_kib(pid) {
            peak_rss = peak_rss.max(rss);
            samples += 1;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    let elapsed = t0.elapsed();
    let (hwm, rss_after) = memory_kib(pid).expect("server memory");
    let requests = stats.requests.load(Ordering::Relaxed);
    eprintln!(
        "load: {clients} clients × {secs} s, ran {:.1} s: {}; {:.0} requests/s; server VmHWM \
         {} MiB (before the load {} MiB), peak sampled VmRSS {} MiB over {samples} samples, \
         VmRSS after {} MiB",
        elapsed.as_secs_f64(),
        stats.summary(),
        requests as f64 / elapsed.as_secs_f64(),
        hwm / 1024,
        hwm_before / 1024,
        peak_rss / 1024,
        rss_after / 1024
    );
    assert_eq!(
        stats.server_errors.load(Ordering::Relaxed),
        0,
        "5xx answers: {:#?}\nserver log:\n{}",
        stats.failures(),
        server.log_problems()
    );
    assert_eq!(
        stats.total_failures(),
        0,
        "failures: {:#?}\nserver log:\n{}",
        stats.failures(),
        server.log_problems()
    );
    assert!(stats.creates.load(Ordering::Relaxed) >= clients as u64);
    assert!(stats.commands.load(Ordering::Relaxed) > 0);
    assert!(
        hwm / 1024 < max_rss_mib,
        "server peak memory {} MiB is over {max_rss_mib} MiB",
        hwm / 1024
    );
    // Every sandbox was deleted: nothing is left on the node.
    let left = cove_e2e::runc_containers(&server.data_dir);
    assert!(left.is_empty(), "containers left: {left:?}");
    drop(server);
}
