//! Orgs over HTTP, the management router over the fake node (`cove-test-support`) with real
//! keys: API keys are stored hashed and a revoked one is refused, another org's sandbox is not
//! found, quotas answer 429 with `Retry-After`, and the audit log records who did what.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cove_api_types::{OperationState, DEFAULT_ORG};
use cove_control_plane::orgs::scope::as_system;
use cove_control_plane::{ControlPlane, ControlPlaneConfig};
use cove_store::SqliteStore;
use cove_test_support::FakeNode;
use tower::ServiceExt;

/// A control plane over the fake node and a fresh store in `dir`, with release 1 of `base`
/// built.
async fn control_plane(dir: &std::path::Path) -> ControlPlane {
    let store = SqliteStore::open(&dir.join("store.db"))
        .await
        .expect("open store");
    let cp = ControlPlane::new(
        Arc::new(store),
        Arc::new(FakeNode::new()),
        ControlPlaneConfig::new("http://127.0.0.1:9"),
    );
    let built = as_system(cp.build_release("base", Default::default()))
        .await
        .expect("build base");
    let op = settle(&cp, &built.operation.id).await;
    assert_eq!(op, OperationState::Succeeded);
    cp
}

/// The final state of operation `op_id`.
async fn settle(cp: &ControlPlane, op_id: &str) -> OperationState {
    let waited = as_system(cp.operations().wait(op_id, Duration::from_secs(20)))
        .await
        .expect("wait");
    assert!(waited.state.is_final(), "{waited:?}");
    waited.state
}

async fn send(
    router: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(match body {
            Some(b) => Body::from(b.to_string()),
            None => Body::empty(),
        })
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("response");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .expect("body");
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, headers, json)
}

#[tokio::test]
async fn keys_are_hashed_revocable_and_quotas_answer_429_with_retry_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cp = control_plane(dir.path()).await;
    as_system(async {
        let admin = cp
            .bootstrap_admin_token()
            .await
            .expect("bootstrap")
            .expect("token");
        let api = cove_http::management_router(cp.clone());

        let (st, _, org) = send(
            &api,
            "POST",
            "/v1/orgs",
            &admin,
            Some(serde_json::json!({"id": "acme", "quotas": {"max_running": 1}})),
        )
        .await;
        assert_eq!(st, StatusCode::CREATED, "{org}");
        assert_eq!(org["quotas"]["max_running"], 1);
        let (st, _, made) = send(
            &api,
            "POST",
            "/v1/orgs/acme/keys",
            &admin,
            Some(serde_json::json!({"name": "ci"})),
        )
        .await;
        assert_eq!(st, StatusCode::CREATED, "{made}");
        let secret = made["secret"].as_str().expect("secret").to_string();
        let key_id = made["key"]["id"].as_str().expect("id").to_string();
        assert!(secret.starts_with(made["key"]["prefix"].as_str().expect("prefix")));

        // The store holds the hash, never the secret.
        let keys = cp.store().list_api_keys("acme").await.expect("keys");
        assert_eq!(keys.len(), 1);
        let stored = cp
            .store()
            .api_key_by_hash(&cove_control_plane::auth::hash_token(&secret))
            .await
            .expect("by hash")
            .expect("found");
        assert_eq!(stored.id, key_id);
        assert!(cp
            .store()
            .api_key_by_hash(&secret)
            .await
            .expect("by secret")
            .is_none());
        let (_, _, listed) = send(&api, "GET", "/v1/orgs/acme/keys", &admin, None).await;
        assert!(!listed.to_string().contains(&secret));

        // The key creates a sandbox in its org; the admin (default org) does not see it.
        let (st, _, created) = send(
            &api,
            "POST",
            "/v1/sandboxes",
            &secret,
            Some(serde_json::json!({})),
        )
        .await;
        assert_eq!(st, StatusCode::ACCEPTED, "{created}");
        assert_eq!(created["sandbox"]["org"], "acme");
        let id = created["sandbox"]["id"].as_str().expect("id").to_string();
        let op = created["operation"]["id"].as_str().expect("op").to_string();
        settle(&cp, &op).await;
        let (st, _, body) = send(&api, "GET", &format!("/v1/sandboxes/{id}"), &admin, None).await;
        assert_eq!(
            (st, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("sandbox_not_found"))
        );
        let (st, _, body) = send(
            &api,
            "POST",
            &format!("/v1/sandboxes/{id}/commands"),
            &admin,
            Some(serde_json::json!({"argv": ["true"]})),
        )
        .await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{body}");
        let (st, _, _) = send(&api, "GET", &format!("/v1/sandboxes/{id}"), &secret, None).await;
        assert_eq!(st, StatusCode::OK);

        // A second running sandbox is past max_running: 429, the quota named, Retry-After.
        let (st, headers, body) = send(
            &api,
            "POST",
            "/v1/sandboxes",
            &secret,
            Some(serde_json::json!({})),
        )
        .await;
        assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["code"], "quota_exceeded");
        assert!(body["message"]
            .as_str()
            .expect("message")
            .contains("max_running"));
        assert!(headers.get("retry-after").is_some());
        // Quotas replaced by a rate alone: the second sandbox is created, the third in the same
        // second is past max_creates_per_s.
        let (st, _, _) = send(
            &api,
            "PUT",
            "/v1/orgs/acme/quotas",
            &admin,
            Some(serde_json::json!({"max_creates_per_s": 1})),
        )
        .await;
        assert_eq!(st, StatusCode::OK);
        let (st, _, _) = send(
            &api,
            "POST",
            "/v1/sandboxes",
            &secret,
            Some(serde_json::json!({})),
        )
        .await;
        assert_eq!(st, StatusCode::ACCEPTED);
        let (st, headers, body) = send(
            &api,
            "POST",
            "/v1/sandboxes",
            &secret,
            Some(serde_json::json!({})),
        )
        .await;
        assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(body["message"]
            .as_str()
            .expect("message")
            .contains("max_creates_per_s"));
        assert_eq!(headers["retry-after"], "1");

        // An org key may not manage orgs.
        let (st, _, _) = send(&api, "GET", "/v1/orgs", &secret, None).await;
        assert_eq!(st, StatusCode::FORBIDDEN);

        // The audit log: the key sees its own org's records, the admin everyone's.
        let (st, _, page) = send(&api, "GET", "/v1/audit", &secret, None).await;
        assert_eq!(st, StatusCode::OK);
        let entries = page["entries"].as_array().expect("entries");
        assert!(entries.iter().all(|e| e["org"] == "acme"), "{page}");
        assert!(entries.iter().any(|e| e["action"] == "POST /v1/sandboxes"
            && e["actor"] == key_id.as_str()
            && e["outcome"] == "ok"));
        assert!(entries
            .iter()
            .any(|e| e["outcome"] == "quota_exceeded" && e["status"] == 429));
        let (_, _, all) = send(&api, "GET", "/v1/audit", &admin, None).await;
        let all = all["entries"].as_array().expect("entries");
        assert!(all.iter().any(|e| e["org"] == DEFAULT_ORG
            && e["action"] == "POST /v1/orgs/{org}/keys"
            && e["resource"] == "acme"
            && e["actor"] == "admin"));
        assert!(all
            .iter()
            .any(|e| e["org"] == DEFAULT_ORG && e["status"] == 404));

        // Revoked: 401 from then on.
        let (st, _, _) = send(
            &api,
            "DELETE",
            &format!("/v1/orgs/acme/keys/{key_id}"),
            &admin,
            None,
        )
        .await;
        assert_eq!(st, StatusCode::OK);
        let (st, _, body) = send(&api, "GET", "/v1/sandboxes", &secret, None).await;
        assert_eq!(
            (st, body["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized"))
        );
    })
    .await;
}
