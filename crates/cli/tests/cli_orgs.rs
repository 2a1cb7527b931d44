//! `cove org create|features|retention|ls` against a real server: features turned off for an
//! org and its checkpoint retention are set, replaced and shown; an unknown feature is refused
//! before any request.

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
