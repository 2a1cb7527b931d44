//! Sandbox rows: round trip, unique ids, compare-and-set, listing and paging.

use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{EgressPolicy, Sandbox, SandboxState};
use cove_store::{SandboxFilter, Store, StoreError};

use crate::fixtures::{bare_sandbox, now, sandbox, tick};

pub async fn sandboxes_round_trip(store: Arc<dyn Store>) {
    let full = sandbox("sb-full");
    let bare = bare_sandbox("sb-bare");
    store.insert_sandbox(&full).await.expect("insert full");
    store.insert_sandbox(&bare).await.expect("insert bare");
    assert_eq!(store.get_sandbox("sb-full").await.expect("get"), full);
    assert_eq!(store.get_sandbox("sb-bare").await.expect("get"), bare);
    assert!(matches!(
        store.get_sandbox("sb-none").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn sandbox_ids_are_unique(store: Arc<dyn Store>) {
    store
        .insert_sandbox(&sandbox("sb-1"))
        .await
        .expect("insert");
    let again = Sandbox {
        template: "other".into(),
        ..sandbox("sb-1")
    };
    assert!(matches!(
        store.insert_sandbox(&again).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.get_sandbox("sb-1").await.expect("get").template,
        "tiny"
    );
}

pub async fn sandbox_transitions_are_compare_and_set(store: Arc<dyn Store>) {
    let s = sandbox("sb-1");
    store.insert_sandbox(&s).await.expect("insert");
    tick().await;
    let moved = store
        .transition_sandbox("sb-1", &[SandboxState::Paused], SandboxState::Running, None)
        .await
        .expect("stale");
    assert!(!moved, "not in `from`");
    assert_eq!(store.get_sandbox("sb-1").await.expect("get"), s);

    let moved = store
        .transition_sandbox(
            "sb-1",
            &[SandboxState::Creating, SandboxState::Running],
            SandboxState::Failed,
            Some("node_lost"),
        )
        .await
        .expect("move");
    assert!(moved);
    let got = store.get_sandbox("sb-1").await.expect("get");
    assert_eq!(
        (got.state, got.state_reason.as_deref()),
        (SandboxState::Failed, Some("node_lost"))
    );
    assert!(got.updated_at > s.updated_at, "updated_at moves");
    assert_eq!(got.created_at, s.created_at);

    // Clearing the reason, and an unknown id.
    assert!(store
        .transition_sandbox(
            "sb-1",
            &[SandboxState::Failed],
            SandboxState::Deleting,
            None
        )
        .await
        .expect("move"));
    assert_eq!(
        store.get_sandbox("sb-1").await.expect("get").state_reason,
        None
    );
    assert!(!store
        .transition_sandbox("sb-x", &[SandboxState::Running], SandboxState::Paused, None)
        .await
        .expect("unknown"));
    assert!(!store
        .transition_sandbox("sb-1", &[], SandboxState::Paused, None)
        .await
        .expect("empty from"));
}

/// Inserts `(id, template, state, minutes ago)` rows.
async fn insert_rows(store: &dyn Store, rows: &[(&str, &str, SandboxState, i64)]) {
    let base = now();
    for (id, template, state, ago) in rows {
        let at = base - Duration::minutes(*ago);
        let s = Sandbox {
            template: (*template).into(),
            state: *state,
            created_at: at,
            updated_at: at,
            ..sandbox(id)
        };
        store.insert_sandbox(&s).await.expect("insert");
    }
}

fn ids(list: &[Sandbox]) -> Vec<&str> {
    list.iter().map(|s| s.id.as_str()).collect()
}

pub async fn listing_filters_and_orders_newest_first(store: Arc<dyn Store>) {
    use SandboxState::*;
    insert_rows(
        &*store,
        &[
            ("sb-a", "tiny", Running, 5),
            ("sb-b", "base", Paused, 4),
            ("sb-c", "tiny", Deleted, 3),
            ("sb-d", "base", Running, 2),
            // Same time as sb-d: the id breaks the tie, descending.
            ("sb-e", "tiny", Running, 2),
        ],
    )
    .await;
    let list = |f: SandboxFilter| {
        let store = store.clone();
        async move { store.list_sandboxes(&f).await.expect("list") }
    };
    let page = |limit| SandboxFilter {
        limit,
        ..Default::default()
    };
    assert_eq!(ids(&list(page(10)).await), ["sb-e", "sb-d", "sb-b", "sb-a"]);
    assert_eq!(ids(&list(page(2)).await), ["sb-e", "sb-d"]);
    assert_eq!(
        ids(&list(SandboxFilter {
            include_deleted: true,
            ..page(10)
        })
        .await),
        ["sb-e", "sb-d", "sb-c", "sb-b", "sb-a"]
    );
    assert_eq!(
        ids(&list(SandboxFilter {
            state: Some(Running),
            ..page(10)
        })
        .await),
        ["sb-e", "sb-d", "sb-a"]
    );
    assert_eq!(
        ids(&list(SandboxFilter {
            state: Some(Deleted),
            ..page(10)
        })
        .await),
        ["sb-c"],
        "asking for deleted ones lists them"
    );
    assert_eq!(
        ids(&list(SandboxFilter {
            template: Some("tiny".into()),
            ..page(10)
        })
        .await),
        ["sb-e", "sb-a"]
    );
    assert_eq!(
        ids(&list(SandboxFilter {
            template: Some("base".into()),
            state: Some(Paused),
            ..page(10)
        })
        .await),
        ["sb-b"]
    );
    assert!(list(SandboxFilter {
        template: Some("none".into()),
        ..page(10)
    })
    .await
    .is_empty());
}

/// The org and metadata filters (metadata is a JSON column: each backend has its own way of
/// reading a key, so keys with JSON path characters and values that look like JSON are here).
pub async fn listing_filters_by_org_and_metadata(store: Arc<dyn Store>) {
    let with = |id: &str, org: &str, metadata: &[(&str, &str)]| Sandbox {
        org: org.into(),
        metadata: metadata
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        ..sandbox(id)
    };
    let rows = [
        with("sb-1", "acme", &[("team", "a"), ("env", "prod")]),
        with("sb-2", "acme", &[("team", "b"), ("env", "prod")]),
        with("sb-3", "other", &[("team", "a")]),
        with(
            "sb-4",
            "acme",
            &[("a.b", "x"), ("quote\"d", "1"), ("$.team", "a")],
        ),
    ];
    for s in &rows {
        store.insert_sandbox(s).await.expect("insert");
    }
    let list = |org: Option<&str>, metadata: &[(&str, &str)]| {
        let store = store.clone();
        let f = SandboxFilter {
            org: org.map(str::to_string),
            metadata: metadata
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            limit: 10,
            ..Default::default()
        };
        async move {
            let mut got: Vec<String> = store
                .list_sandboxes(&f)
                .await
                .expect("list")
                .into_iter()
                .map(|s| s.id)
                .collect();
            got.sort();
            got
        }
    };
    assert_eq!(list(Some("acme"), &[]).await, ["sb-1", "sb-2", "sb-4"]);
    assert_eq!(list(None, &[("team", "a")]).await, ["sb-1", "sb-3"]);
    assert_eq!(list(Some("acme"), &[("team", "a")]).await, ["sb-1"]);
    assert_eq!(
        list(None, &[("team", "a"), ("env", "prod")]).await,
        ["sb-1"],
        "every pair must match"
    );
    assert!(list(None, &[("team", "a"), ("env", "dev")])
        .await
        .is_empty());
    assert!(list(None, &[("team", "c")]).await.is_empty());
    assert_eq!(list(None, &[("a.b", "x")]).await, ["sb-4"]);
    assert_eq!(list(None, &[("quote\"d", "1")]).await, ["sb-4"]);
    assert_eq!(list(None, &[("$.team", "a")]).await, ["sb-4"]);
    assert!(
        list(None, &[("a", "x")]).await.is_empty(),
        "a key is not a path"
    );
    assert!(list(Some("nobody"), &[]).await.is_empty());
}

pub async fn cursor_paging_visits_every_row_once(store: Arc<dyn Store>) {
    let rows: Vec<(String, i64)> = (0..11)
        .map(|i| (format!("sb-{i:02}"), (i / 3) as i64))
        .collect();
    let spec: Vec<(&str, &str, SandboxState, i64)> = rows
        .iter()
        .map(|(id, ago)| (id.as_str(), "tiny", SandboxState::Running, *ago))
        .collect();
    insert_rows(&*store, &spec).await;
    let all = store
        .list_sandboxes(&SandboxFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("all");
    assert_eq!(all.len(), 11);
    let mut seen = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = store
            .list_sandboxes(&SandboxFilter {
                limit: 4,
                after: after.clone(),
                ..Default::default()
            })
            .await
            .expect("page");
        assert!(page.len() <= 4);
        let Some(last) = page.last() else { break };
        after = Some((last.created_at, last.id.clone()));
        seen.extend(page.into_iter().map(|s| s.id));
    }
    assert_eq!(seen, ids(&all), "pages concatenate to the full listing");
}

pub async fn sandboxes_in_returns_the_asked_states(store: Arc<dyn Store>) {
    use SandboxState::*;
    insert_rows(
        &*store,
        &[
            ("sb-1", "tiny", Running, 1),
            ("sb-2", "tiny", Suspending, 1),
            ("sb-3", "tiny", Creating, 1),
            ("sb-4", "tiny", Deleted, 1),
        ],
    )
    .await;
    let mut got: Vec<String> = store
        .sandboxes_in(&[Creating, Suspending])
        .await
        .expect("in")
        .into_iter()
        .map(|s| s.id)
        .collect();
    got.sort();
    assert_eq!(got, ["sb-2", "sb-3"]);
    assert!(store.sandboxes_in(&[Paused]).await.expect("in").is_empty());
    assert!(store.sandboxes_in(&[]).await.expect("in").is_empty());
}

pub async fn network_policy_is_replaced_and_secrets_stay_sealed(store: Arc<dyn Store>) {
    let s = sandbox("sb-1");
    store.insert_sandbox(&s).await.expect("insert");
    assert_eq!(store.sealed_secrets("sb-1").await.expect("sealed"), None);
    let open = EgressPolicy::parse(true, &[] as &[&str], &["10.0.0.0/8"]).expect("policy");
    assert!(store.set_sandbox_network("sb-1", &open).await.expect("set"));
    assert!(!store
        .set_sandbox_network("sb-none", &open)
        .await
        .expect("set unknown"));
    let got = store.get_sandbox("sb-1").await.expect("get");
    assert_eq!(got.network, open);
    assert_eq!(
        Sandbox {
            network: s.network.clone(),
            ..got
        },
        s,
        "only the policy changed"
    );
    assert!(got.public, "public round-trips");
    assert!(store
        .set_sandbox_public("sb-1", false)
        .await
        .expect("private"));
    assert!(!store.get_sandbox("sb-1").await.expect("get").public);
    assert!(!store
        .set_sandbox_public("sb-none", true)
        .await
        .expect("public unknown"));
    assert!(store
        .set_sandbox_public("sb-1", true)
        .await
        .expect("public"));
    assert!(store.get_sandbox("sb-1").await.expect("get").public);
    assert!(store
        .set_sealed_secrets("sb-1", "v1:opaque")
        .await
        .expect("seal"));
    assert_eq!(
        store
            .sealed_secrets("sb-1")
            .await
            .expect("sealed")
            .as_deref(),
        Some("v1:opaque")
    );
    assert!(!store
        .set_sealed_secrets("sb-none", "v1:x")
        .await
        .expect("unknown"));
    assert!(matches!(
        store.sealed_secrets("sb-none").await,
        Err(StoreError::NotFound)
    ));
    let public = std::collections::BTreeMap::from([(
        "API_KEY".to_string(),
        cove_api_types::SandboxSecret {
            hosts: vec!["api.example.com".parse().expect("host")],
        },
    )]);
    assert!(store
        .set_sandbox_secrets("sb-1", &public, "v1:claimed")
        .await
        .expect("secrets"));
    assert_eq!(
        store.get_sandbox("sb-1").await.expect("get").secrets,
        public
    );
    assert_eq!(
        store
            .sealed_secrets("sb-1")
            .await
            .expect("sealed")
            .as_deref(),
        Some("v1:claimed")
    );
    assert!(!store
        .set_sandbox_secrets("sb-none", &public, "v1:x")
        .await
        .expect("unknown"));
    let mounts = vec![cove_api_types::VolumeMount {
        name: "data".into(),
        path: "/data".into(),
        read_only: true,
    }];
    assert!(store
        .set_sandbox_volumes("sb-1", &mounts)
        .await
        .expect("volumes"));
    assert_eq!(
        store.get_sandbox("sb-1").await.expect("get").volumes,
        mounts
    );
    assert!(!store
        .set_sandbox_volumes("sb-none", &mounts)
        .await
        .expect("unknown"));
    assert!(store.set_sandbox_volumes("sb-1", &[]).await.expect("none"));
    assert!(store
        .get_sandbox("sb-1")
        .await
        .expect("get")
        .volumes
        .is_empty());
    // The sealed column is not part of the sandbox as listed.
    let listed = store
        .list_sandboxes(&SandboxFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    let json = serde_json::to_string(&listed).expect("json");
    assert!(!json.contains("opaque"), "{json}");
}
