//! `cove org create|features|retention|quota|ls` against a real server: features turned off
//! for an org and its checkpoint retention are set, replaced and shown; an unknown feature is
//! refused before any request; every quota flag is sent and shown.

mod support;
use support::{cove, ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_features_and_retention_are_set_and_shown() {
    let id = format!("cli-gates-{}", std::process::id());
    let made = ok(&[
        "org",
        "create",
        &id,
        "--disable",
        "fork,volumes",
        "--checkpoint-max-per-sandbox",
        "3",
        "--json",
    ])
    .await;
    let made: serde_json::Value = serde_json::from_str(&made).expect("json");
    assert_eq!(
        made[0]["disabled_features"],
        serde_json::json!(["fork", "volumes"])
    );
    assert_eq!(made[0]["checkpoint_retention"]["max_per_sandbox"], 3);

    let changed = ok(&["org", "features", &id, "--disable", "export"]).await;
    let row = changed.lines().nth(1).expect("a row");
    assert!(row.contains(" export "), "{changed}");
    let changed = ok(&["org", "retention", &id, "--checkpoint-max-age-s", "3600"]).await;
    let row = changed.lines().nth(1).expect("a row");
    // The retention is replaced: no per-sandbox limit any more, one hour of age.
    assert!(row.contains(" - ") && row.contains(" 3600 "), "{changed}");
    let listed = ok(&["org", "ls"]).await;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" export ")),
        "{listed}"
    );
    let cleared = ok(&["org", "features", &id, "--json"]).await;
    let cleared: serde_json::Value = serde_json::from_str(&cleared).expect("json");
    assert_eq!(cleared[0]["disabled_features"], serde_json::json!([]));

    let (code, _, stderr) = cove(&["org", "features", &id, "--disable", "teleport"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("unknown feature"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_quotas_are_set_replaced_and_shown() {
    let id = format!("cli-quotas-{}", std::process::id());
    let made = ok(&[
        "org",
        "create",
        &id,
        "--max-sandboxes",
        "7",
        "--max-disk-mib",
        "40960",
        "--max-snapshot-mib",
        "2048",
        "--json",
    ])
    .await;
    let made: serde_json::Value = serde_json::from_str(&made).expect("json");
    assert_eq!(
        made[0]["quotas"],
        serde_json::json!({"max_sandboxes": 7, "max_disk_mib": 40960, "max_snapshot_mib": 2048})
    );
    // `quota` replaces every limit.
    let set = ok(&[
        "org",
        "quota",
        &id,
        "--max-running",
        "2",
        "--max-disk-mib",
        "1024",
        "--max-snapshot-mib",
        "512",
    ])
    .await;
    let header = set.lines().next().expect("a header");
    assert!(
        header.contains(" SANDBOXES ")
            && header.contains(" DISK_MIB ")
            && header.contains(" SNAPSHOT_MIB "),
        "{set}"
    );
    let row = set.lines().nth(1).expect("a row");
    assert!(row.contains(" 1024 ") && row.contains(" 512 "), "{set}");
    let listed = ok(&["org", "ls", "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    let mine = listed
        .as_array()
        .expect("orgs")
        .iter()
        .find(|o| o["id"] == id.as_str())
        .expect("listed");
    assert_eq!(
        mine["quotas"],
        serde_json::json!({"max_running": 2, "max_disk_mib": 1024, "max_snapshot_mib": 512})
    );
}
