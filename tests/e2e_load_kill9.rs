//! Issue 12, faults: the server is killed with SIGKILL in the middle of a mixed load
//! (`load.rs`), then restarted on the same data dir. No sandbox is lost: every sandbox the
//! clients saw accepted and did not ask to delete is listed, and runs a command, or is
//! paused, suspended, or failed with a reason. None is orphaned: the runc containers, overlay
//! mounts, sandbox directories and network records on the host are exactly those of the
//! running and paused sandboxes the server knows.
//!
//! Size: `COVE_LOAD_CLIENTS` clients (default 6), killed after `COVE_LOAD_KILL_AFTER_S`
//! seconds of load (default 12).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cove_api_types::SandboxState;
use cove_client::{Client, ListSandboxes};
use cove_e2e::load::{env_or, LoadClient, Stats};
use cove_e2e::server_process::{dir_names, overlay_mounts, ServerProcess};

async fn all_sandboxes(c: &Client) -> Vec<cove_api_types::Sandbox> {
    let mut out = Vec::new();
    let mut filter = ListSandboxes {
        limit: Some(200),
        ..Default::default()
    };
    for _ in 0..50 {
        let page = c.list_sandboxes(&filter).await.expect("list");
        out.extend(page.sandboxes);
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => break,
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_load_loses_and_orphans_no_sandbox() {
    let clients = env_or("COVE_LOAD_CLIENTS", 6) as usize;
    let kill_after = Duration::from_secs(env_or("COVE_LOAD_KILL_AFTER_S", 12));
    let mut server = ServerProcess::new(Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")), 30_000);
    let data_dir = server.data_dir.clone();
    let c = server.start().await;
    cove_e2e::build_template(&c, "tiny").await;

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + kill_after + Duration::from_secs(120);
    let tasks: Vec<_> = (0..clients)
        .map(|no| {
            let client = LoadClient::new(c.clone(), no, "tiny", until, stop.clone(), stats.clone());
            tokio::spawn(client.run())
        })
        .collect();
    tokio::time::sleep(kill_after).await;
    let before = stats.summary();
    assert_eq!(
        stats.total_failures(),
        0,
        "failures before the kill: {:#?}",
        stats.failures()
    );
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(150), t)
            .await
            .expect("clients stop once the server is gone")
            .expect("client task");
    }
    let t_restart = Instant::now();
    let c = server.start().await;
    let restart = t_restart.elapsed();

    let created = stats.created();
    let delete_requested = stats.delete_requested();
    let listed = all_sandboxes(&c).await;
    let known: BTreeSet<String> = listed.iter().map(|s| s.id.clone()).collect();
    let mut states = std::collections::BTreeMap::<&str, usize>::new();
    let mut failed = Vec::new();
    for id in &created {
        let s = match c.get_sandbox(id).await {
            Ok(s) => s,
            Err(e) if e.status() == Some(404) => {
                assert!(
                    delete_requested.contains(id),
                    "sandbox {id} was lost: never deleted, not found after the restart"
                );
                *states.entry("deleted").or_default() += 1;
                continue;
            }
            Err(e) => panic!("get {id}: {e}"),
        };
        assert!(known.contains(id), "{id} is not listed");
        *states.entry(s.state.as_str()).or_default() += 1;
        match s.state {
            SandboxState::Running => {
                let out = cove_e2e::sh(&c, id, "echo alive").await;
                assert_eq!(out.stdout_text(), "alive\n", "{id} works after the restart");
            }
            SandboxState::Paused | SandboxState::Suspended => {}
            SandboxState::Failed => {
                let why = s.state_reason.clone().unwrap_or_default();
                assert!(!why.is_empty(), "{id} failed without a reason");
                failed.push(why);
            }
            other => panic!("{id} left {other:?} after the restart: {s:?}"),
        }
    }
    // Nothing orphaned: the host holds exactly what the live sandboxes need.
    let live: BTreeSet<String> = listed
        .iter()
        .filter(|s| matches!(s.state, SandboxState::Running | SandboxState::Paused))
        .map(|s| s.id.clone())
        .collect();
    assert_eq!(
        cove_e2e::runc_containers(&data_dir),
        live,
        "runc containers"
    );
    assert_eq!(overlay_mounts(&data_dir), live, "overlay mounts");
    assert_eq!(
        dir_names(&data_dir.join("sandboxes")),
        live,
        "sandbox directories"
    );
    let records: BTreeSet<String> = dir_names(&data_dir.join("network"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    if c.capabilities().await.expect("caps").network {
        assert_eq!(records, live, "network records");
    }
    eprintln!(
        "kill -9 after {} s of load by {clients} clients ({before}); restart answered in \
         {:.2} s; {} sandboxes seen created, after the restart: {states:?}; failed ones: \
         {failed:?}",
        kill_after.as_secs(),
        restart.as_secs_f64(),
        created.len()
    );

    // Everything still there can be deleted; then nothing is left.
    for s in listed {
        if s.state != SandboxState::Deleted {
            cove_e2e::delete(&c, &s.id).await;
        }
    }
    assert!(cove_e2e::runc_containers(&data_dir).is_empty());
    assert!(overlay_mounts(&data_dir).is_empty());
    assert!(dir_names(&data_dir.join("sandboxes")).is_empty());
    let records = dir_names(&data_dir.join("network"));
    assert!(
        records.iter().all(|n| !n.ends_with(".json")),
        "no network record left: {records:?}"
    );
}
