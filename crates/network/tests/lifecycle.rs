//! Sandbox network lifecycle: many create/release cycles leave nothing behind, and a restart
//! re-adopts claimed namespaces and removes the rest. Needs root.

mod support;

use std::time::{Duration, Instant};

use cove_network::lab::WEB_A;
use cove_network::{inventory, Adopt, EgressPolicy, Network};
use support::{http, Fixture};

/// Create/release cycles in the leak test.
const CYCLES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_cycles_leave_no_links_rules_or_addresses() {
    let fx = Fixture::new("lcyc").await;
    let prefix = fx.node_prefix.clone();
    let net = fx.net();
    let host_links_before = inventory(&prefix).expect("inv").host_links;
    assert!(
        net.wait_prepared(Duration::from_secs(30)).await,
        "pool filled"
    );
    let before = inventory(&prefix).expect("inventory before");
    let prepared = net.config().prepared;
    assert_eq!(before.namespaces.len(), 1 + prepared, "{before:?}");
    assert_eq!(before.gateway_links, 1 + prepared, "{before:?}");
    assert_eq!(before.nft_elements, prepared, "{before:?}");

    let mut attach_us = Vec::with_capacity(CYCLES);
    for i in 0..CYCLES {
        let id = format!("c{i}");
        let t = Instant::now();
        let att = net
            .attach(&id, EgressPolicy::default())
            .await
            .expect("attach");
        attach_us.push(t.elapsed().as_micros());
        if i % 50 == 0 {
            // Every so often, prove the network in it really works.
            assert!(http(&att.netns, WEB_A, 80, "a").await.is_ok(), "cycle {i}");
        }
        net.release(&id).await.expect("release");
    }
    assert!(
        net.wait_prepared(Duration::from_secs(30)).await,
        "pool refilled"
    );
    let after = inventory(&prefix).expect("inventory after");
    // Slots rotate, so the prepared namespaces have other names; every count must match.
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
    assert_eq!(
        counts(&after),
        counts(&before),
        "leak after {CYCLES} cycles: {before:?} -> {after:?}"
    );
    attach_us.sort_unstable();
    eprintln!(
        "attach over {CYCLES} cycles: p50 {} us, p90 {} us, max {} us",
        attach_us[CYCLES / 2],
        attach_us[CYCLES * 9 / 10],
        attach_us[CYCLES - 1]
    );
    fx.finish().await;
    let gone = inventory(&prefix).expect("inventory at end");
    assert!(
        gone.namespaces.is_empty() && gone.nft_rules == 0,
        "{gone:?}"
    );
    assert_eq!(gone.host_links, host_links_before, "host links changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_adopts_claimed_namespaces_and_removes_the_rest() {
    let mut fx = Fixture::new("lrec").await;
    let prefix = fx.node_prefix.clone();
    let keep = fx
        .net()
        .attach("keep", EgressPolicy::default())
        .await
        .expect("attach keep");
    let lose = fx
        .net()
        .attach("lose", EgressPolicy::default())
        .await
        .expect("attach lose");
    assert!(fx.net().wait_prepared(Duration::from_secs(30)).await);
    // A crash: the handle goes away without cleaning up; namespaces stay. Add the leftover of a
    // create interrupted half-way (a namespace without its veth).
    drop(fx.net.take());
    let half = format!("{prefix}-s77");
    let made = std::process::Command::new("ip")
        .args(["netns", "add", &half])
        .status();
    assert!(made.expect("ip").success(), "half-made namespace");
    let left = inventory(&prefix).expect("inv");
    assert!(
        left.namespaces.contains(&keep.netns) && left.namespaces.contains(&lose.netns),
        "{left:?}"
    );

    let adopt = vec![
        Adopt {
            sandbox_id: "keep".into(),
            netns: keep.netns.clone(),
            policy: EgressPolicy::default(),
        },
        Adopt {
            sandbox_id: "gone".into(),
            netns: format!("{prefix}-s999"),
            policy: EgressPolicy::default(),
        },
    ];
    let (net, recovery) = Network::start(fx.lab().network_config(&prefix), adopt)
        .await
        .expect("restart");
    fx.net = Some(net);
    assert_eq!(
        recovery.adopted,
        vec![keep.clone()],
        "same namespace and address"
    );
    assert_eq!(recovery.missing, vec!["gone".to_string()]);
    assert!(recovery.removed.contains(&lose.netns), "{recovery:?}");
    assert!(recovery.removed.contains(&half), "{recovery:?}");
    // Not checked by name: the refill of the prepared pool may make a new namespace under a
    // freed slot's name at once. The counts below, once the pool is full, leave no room for
    // a survivor.
    // Only the adopted sandbox and the refilled pool have veths in the new gateway.
    assert!(fx.net().wait_prepared(Duration::from_secs(30)).await);
    let now = inventory(&prefix).expect("inv");
    let prepared = fx.net().config().prepared;
    assert_eq!(now.namespaces.len(), 2 + prepared, "{now:?}");
    assert_eq!(
        (now.gateway_links, now.nft_elements),
        (2 + prepared, 1 + prepared),
        "{now:?}"
    );
    assert!(
        http(&keep.netns, WEB_A, 80, "a").await.is_ok(),
        "adopted sandbox works through the new gateway"
    );
    assert_eq!(
        fx.net()
            .counters("keep")
            .expect("counters")
            .connections_allowed,
        1
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_overlapping_a_route_is_refused_before_anything_is_made() {
    let fx = Fixture::new("lovl").await;
    // The upstream ("host") namespace routes the first /30 of the lab's range.
    let mut cfg = fx.lab().network_config("lovlx");
    cfg.pool = cove_network::lab::inet_range();
    let err = Network::start(cfg, Vec::new())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(err, cove_network::NetworkError::PoolOverlapsRoute { .. }),
        "{err}"
    );
    // And a route of the real host namespace, read now (only compared, never used).
    let host_route = cove_network::cmd::routes(None)
        .expect("host routes")
        .into_iter()
        .find(|r| (16..=29).contains(&r.prefix_len()));
    if let Some(route) = host_route {
        let mut cfg = fx.lab().network_config("lovlx");
        cfg.pool = route.trunc();
        let err = Network::start(cfg, Vec::new())
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(err, cove_network::NetworkError::PoolOverlapsRoute { .. }),
            "{err}"
        );
    }
    assert!(inventory("lovlx").expect("inv").namespaces.is_empty());
    fx.finish().await;
}
