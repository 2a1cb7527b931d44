//! Issue 9, leaks: many create → delete cycles of networked sandboxes through a real server
//! (default settings: networking on, the host as upstream) leave no namespace, link, route,
//! address or nft element behind. Its own test binary, so no other test's sandboxes move the
//! counts. `COVE_NET_CYCLES` overrides the number of cycles (default 200; `cove-bench --net-leak`
//! runs 1,000).

use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, OperationState};
use cove_e2e::{client, ensure_template, server};

/// Sandboxes created and deleted at once.
const PARALLEL: usize = 4;
/// Namespaces the gateway keeps prepared (`NetworkConfig::new`'s default).
const PREPARED: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_delete_cycles_leave_no_network_state() {
    let cycles: usize = std::env::var("COVE_NET_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let c = client();
    assert!(
        c.capabilities().await.expect("caps").network,
        "networking is on by default for a root server with ip and nft"
    );
    ensure_template(&c, "tiny").await;
    let prefix = cove_server::network_prefix_for(&server().data_dir);
    let counts = |i: &cove_network::Inventory| {
        (
            i.namespaces.len(),
            i.gateway_links,
            i.gateway_routes,
            i.gateway_addresses,
            i.nft_elements,
            i.nft_rules,
            i.host_links,
        )
    };
    // Settled: no sandbox, the prepared pool (8 namespaces) full and plumbed.
    let settled = || async {
        let mut inv = cove_network::inventory(&prefix).expect("inventory");
        for _ in 0..300 {
            if inv.namespaces.len() == 1 + PREPARED
                && inv.gateway_links == 1 + PREPARED
                && inv.nft_elements == PREPARED
            {
                return inv;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            inv = cove_network::inventory(&prefix).expect("inventory");
        }
        panic!("the network inventory never settled: {inv:?}")
    };
    let before = settled().await;
    assert!(before.namespaces.len() > 1, "{before:?}");
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut done = 0;
    while done < cycles {
        let n = PARALLEL.min(cycles - done);
        let one = || async {
            let resp = c.create_sandbox(&req, None).await.expect("create");
            let op = c
                .wait_operation(&resp.operation.id, Duration::from_secs(120))
                .await
                .expect("create ends");
            assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
            let op = c.delete_sandbox(&resp.sandbox.id).await.expect("delete");
            let op = c
                .wait_operation(&op.id, Duration::from_secs(120))
                .await
                .expect("delete ends");
            assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
        };
        futures::future::join_all((0..n).map(|_| one())).await;
        done += n;
    }
    let elapsed = t0.elapsed();
    let after = settled().await;
    eprintln!(
        "{cycles} create/delete cycles in {:.1} s ({:.0} ms each, {PARALLEL} at once)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / cycles as f64
    );
    assert_eq!(
        counts(&after),
        counts(&before),
        "leak after {cycles} cycles: {before:?} -> {after:?}"
    );
    let records = std::fs::read_dir(server().data_dir.join("network"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(records, 0, "no network record is left");
}
