//! The measurement function cove-bench calls runs end to end and cleans up. Needs root.

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_measures_both_paths_and_leaves_nothing() {
    support::require_root();
    let r = cove_network::lab::bench("tbch", 20, 4 * 1024 * 1024)
        .await
        .expect("bench");
    assert_eq!(r.rounds, 20);
    for v in [
        r.direct_request_p50_us,
        r.gateway_request_p50_us,
        r.direct_mib_s,
        r.gateway_mib_s,
    ] {
        assert!(v.is_finite() && v > 0.0, "{r:?}");
    }
    assert!(cove_network::inventory("tbch")
        .expect("inventory")
        .namespaces
        .is_empty());
    let left: Vec<String> = cove_network::cmd::netns_names()
        .expect("netns")
        .into_iter()
        .filter(|n| n.starts_with("tbchl-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
