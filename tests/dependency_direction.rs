//! The crate graph points inward (docs/architecture.md): reads `cargo metadata` and fails when a
//! workspace crate depends on one it must not (normal dependencies; dev-dependencies may reach
//! test support).

use std::collections::{BTreeMap, BTreeSet};

/// Workspace crates and the workspace crates each one depends on (normal dependencies only).
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    crate_graph(true)
}

/// Workspace crates and the crates each one depends on (normal dependencies only), all of them
/// when not `workspace_only`.
fn crate_graph(workspace_only: bool) -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata json");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|n| !workspace_only || names.contains(*n))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

#[test]
fn dependencies_point_inward() {
    let graph = workspace_graph();
    let deps = |name: &str| -> &BTreeSet<String> {
        graph
            .get(name)
            .unwrap_or_else(|| panic!("no crate {name} in the workspace"))
    };
    assert!(
        deps("cove-domain").is_empty(),
        "domain is the ground floor: {:?}",
        deps("cove-domain")
    );
    assert!(
        !deps("cove-node-api").contains("cove-guest-protocol"),
        "node-api speaks its own types"
    );
    for forbidden in ["cove-runtime", "cove-node-agent", "cove-guest-protocol"] {
        assert!(
            !deps("cove-control-plane").contains(forbidden),
            "control-plane must reach nodes only through node-api, not {forbidden}"
        );
    }
    assert!(
        !deps("cove-control-plane").contains("cove-node-rpc"),
        "the cluster is transport-agnostic: control-plane reaches nodes through node-api only"
    );
    assert!(
        !deps("cove-control-plane").contains("cove-http"),
        "the services know nothing of HTTP: cove-http depends on control-plane, not the reverse"
    );
    let all = crate_graph(false);
    for framework in ["axum", "hyper", "tower", "tower-http", "utoipa"] {
        assert!(
            !all["cove-control-plane"].contains(framework),
            "control-plane's services speak service types; HTTP ({framework}) is cove-http's"
        );
    }
    let cluster: Vec<_> = deps("cove-cluster").iter().collect();
    assert_eq!(
        cluster,
        ["cove-domain", "cove-node-api", "cove-store"],
        "the cluster places and routes over node-api and the store's registry, below the services"
    );
    let rpc: Vec<_> = deps("cove-node-rpc").iter().collect();
    assert_eq!(
        rpc,
        ["cove-domain", "cove-node-api"],
        "node-rpc carries the node contract, nothing else"
    );
    let guest: Vec<_> = deps("cove-guest-agent").iter().collect();
    assert_eq!(
        guest,
        ["cove-guest-protocol"],
        "the guest agent stands alone"
    );
    let api: Vec<_> = deps("cove-api-types").iter().collect();
    assert_eq!(api, ["cove-domain"], "api-types builds on domain only");
    let mcp: Vec<_> = deps("cove-mcp").iter().collect();
    assert_eq!(
        mcp,
        ["cove-api-types", "cove-client"],
        "the MCP server is a client of the public API, nothing more"
    );
    let console: Vec<_> = deps("cove-console").iter().collect();
    assert_eq!(
        console,
        ["cove-api-types"],
        "the web console is assets over the public API"
    );
    for (name, d) in &graph {
        if name != "cove-test-support" {
            continue;
        }
        for user in graph.keys() {
            assert!(
                !graph[user].contains(name),
                "{user} depends on test support outside dev-dependencies ({d:?})"
            );
        }
    }
}
