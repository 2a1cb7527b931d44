//! Orgs: another org's resources are not found on every route family (service calls made as
//! an org's caller, and the HTTP router with real keys), API keys are stored hashed and a
//! revoked one is refused, quotas answer 429 with `Retry-After`, and the audit log records
//! who did what.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cove_api_types::{
    CreateApiKeyRequest, CreateCheckpointRequest, CreateCommandRequest, CreateOrgRequest,
    ErrorCode, LifecycleRequest, PutPoolRequest, DEFAULT_ORG,
};
use cove_control_plane::orgs::{scope, Actor, Caller};
use cove_control_plane::ports::PortCredentials;
use cove_control_plane::{http, LifecycleVerb, ListQuery, ReadFileQuery};
use tower::ServiceExt;

use crate::harness::{as_org, as_system};
use crate::harness::{code, Harness};

async fn with_orgs() -> Harness {
    let h = Harness::new().await;
    for id in ["a", "b"] {
        h.cp.create_org(CreateOrgRequest {
            id: id.into(),
            ..Default::default()
        })
        .await
        .expect("org");
    }
    h
}

/// A running sandbox of `org`.
async fn running_of(h: &Harness, org: &str) -> String {
    let r = as_org(org, h.cp.create_sandbox(Default::default(), None))
        .await
        .expect("create");
    h.succeeds(&r.operation).await;
    assert_eq!(h.sandbox(&r.sandbox.id).await.org, org);
    r.sandbox.id
}

#[tokio::test]
async fn every_route_family_hides_another_orgs_resources() {
    as_system(async {
        let h = with_orgs().await;
        let a = running_of(&h, "a").await;
        let nf = ErrorCode::SandboxNotFound;
        let cp = &h.cp;

        // Sandboxes: get, list, lifecycle, network, ports, metrics, delete.
        assert_eq!(code(as_org("b", cp.get_sandbox(&a)).await), nf);
        let listed = as_org("b", cp.list_sandboxes(None, None, vec![], Some(100), None))
            .await
            .expect("list");
        assert!(listed.sandboxes.is_empty(), "{listed:?}");
        let own = as_org("a", cp.list_sandboxes(None, None, vec![], Some(100), None))
            .await
            .expect("list");
        assert_eq!(own.sandboxes.len(), 1);
        let pause = cp.lifecycle(&a, LifecycleVerb::Pause, LifecycleRequest::default(), None);
        assert_eq!(code(as_org("b", pause).await), nf);
        assert_eq!(code(as_org("b", cp.sandbox_network(&a)).await), nf);
        assert_eq!(code(as_org("b", cp.delete_sandbox(&a, None)).await), nf);
        assert_eq!(
            code(as_org("b", cp.authorize_port(&a, 80, PortCredentials::default())).await),
            nf
        );

        // Commands and files.
        let argv = CreateCommandRequest {
            argv: Some(vec!["true".into()]),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", cp.create_command(&a, argv.clone())).await),
            nf
        );
        let started = as_org("a", cp.create_command(&a, argv)).await.expect("cmd");
        let cid = started.command.id.clone();
        assert_eq!(code(as_org("b", cp.list_commands(&a, None)).await), nf);
        assert_eq!(code(as_org("b", cp.get_command(&a, &cid, None)).await), nf);
        assert_eq!(code(as_org("b", cp.new_attachment(&a, &cid)).await), nf);
        let list = cp.list_files(&a, ListQuery::default());
        assert_eq!(code(as_org("b", list).await), nf);
        let read = cp.read_file(
            &a,
            ReadFileQuery {
                path: Some("/etc/hostname".into()),
                ..Default::default()
            },
        );
        assert_eq!(as_org("b", read).await.err().map(|e| e.code()), Some(nf));

        // Operations: get, wait, cancel, logs, list.
        let op = as_org(
            "a",
            cp.lifecycle(&a, LifecycleVerb::Pause, Default::default(), None),
        )
        .await
        .expect("pause");
        h.succeeds(&op).await;
        let ops = cp.operations();
        assert_eq!(
            code(as_org("b", ops.get(&op.id)).await),
            ErrorCode::OperationNotFound
        );
        assert_eq!(
            code(as_org("b", ops.cancel(&op.id)).await),
            ErrorCode::OperationNotFound
        );
        assert_eq!(
            code(as_org("b", ops.logs(&op.id, 0)).await),
            ErrorCode::OperationNotFound
        );
        assert!(as_org("b", ops.list(None, None))
            .await
            .expect("ops")
            .is_empty());
        assert!(!as_org("a", ops.list(None, None))
            .await
            .expect("ops")
            .is_empty());
        h.apply(&a, LifecycleVerb::Resume).await;

        // Checkpoints.
        let ck = as_org(
            "a",
            cp.create_checkpoint(&a, CreateCheckpointRequest::default(), None),
        )
        .await
        .expect("checkpoint");
        h.succeeds(&ck.operation).await;
        let ckid = ck.checkpoint.id.clone();
        assert_eq!(
            code(as_org("b", cp.get_checkpoint(&ckid)).await),
            ErrorCode::CheckpointNotFound
        );
        assert_eq!(
            code(as_org("b", cp.delete_checkpoint(&ckid)).await),
            ErrorCode::CheckpointNotFound
        );
        assert!(as_org("b", cp.list_checkpoints(None))
            .await
            .expect("list")
            .checkpoints
            .is_empty());
        assert_eq!(code(as_org("b", cp.list_checkpoints(Some(&a))).await), nf);
        let from_ck = cove_api_types::CreateSandboxRequest {
            checkpoint: Some(ckid.clone()),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", cp.create_sandbox(from_ck, None)).await),
            ErrorCode::CheckpointNotFound
        );
        assert_eq!(
            as_org("a", cp.get_checkpoint(&ckid))
                .await
                .expect("own")
                .org,
            "a"
        );

        // Pools: names are shared, pools are not.
        let pool = PutPoolRequest {
            template: "base".into(),
            release: None,
            resources: None,
            min_ready: 0,
            max: 1,
        };
        as_org("a", cp.put_pool("warm", pool.clone()))
            .await
            .expect("pool");
        assert_eq!(
            code(as_org("b", cp.get_pool("warm")).await),
            ErrorCode::PoolNotFound
        );
        assert_eq!(
            code(as_org("b", cp.delete_pool("warm")).await),
            ErrorCode::PoolNotFound
        );
        assert_eq!(
            code(as_org("b", cp.put_pool("warm", pool)).await),
            ErrorCode::AlreadyExists
        );
        assert!(as_org("b", cp.list_pools())
            .await
            .expect("pools")
            .pools
            .is_empty());

        // Templates: built-ins are shared (usable, not rebuildable by a key).
        let listed = as_org("b", cp.list_templates()).await.expect("templates");
        assert!(listed.templates.iter().any(|t| t.name == "base"));
        assert_eq!(
            code(as_org("b", cp.build_release("base", Default::default())).await),
            ErrorCode::Forbidden
        );

        // Org admin routes need the admin token.
        assert_eq!(
            code(as_org("b", cp.list_orgs()).await),
            ErrorCode::Forbidden
        );
        assert_eq!(
            code(as_org("b", cp.get_org("a")).await),
            ErrorCode::NotFound
        );
        assert_eq!(as_org("b", cp.get_org("b")).await.expect("own").id, "b");

        // The owner still has everything.
        assert_eq!(as_org("a", cp.get_sandbox(&a)).await.expect("own").id, a);
        // The admin token acts in the default org: it does not see org a's sandbox either.
        assert_eq!(
            code(scope::scoped(Caller::admin(), cp.get_sandbox(&a)).await),
            nf
        );
    })
    .await;
}

#[tokio::test]
async fn file_templates_belong_to_their_org() {
    as_system(async {
        let h = with_orgs().await;
        // Another org's file template is not there for b, even by name in a create.
        h.cp.store()
            .put_file_template("web", "a", "FROM base\n")
            .await
            .expect("template");
        assert_eq!(
            code(as_org("b", h.cp.get_template("web")).await),
            ErrorCode::TemplateNotFound
        );
        let req = cove_api_types::CreateSandboxRequest {
            template: Some("web".into()),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", h.cp.create_sandbox(req, None)).await),
            ErrorCode::TemplateNotFound
        );
        assert_eq!(
            as_org("a", h.cp.get_template("web"))
                .await
                .expect("own")
                .org
                .as_deref(),
            Some("a")
        );
    })
    .await;
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
    as_system(async {
        let h = Harness::new().await;
        let admin =
            h.cp.bootstrap_admin_token()
                .await
                .expect("bootstrap")
                .expect("token");
        let api = http::management_router(h.cp.clone());

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
        let keys = h.cp.store().list_api_keys("acme").await.expect("keys");
        assert_eq!(keys.len(), 1);
        let stored =
            h.cp.store()
                .api_key_by_hash(&cove_control_plane::auth::hash_token(&secret))
                .await
                .expect("by hash")
                .expect("found");
        assert_eq!(stored.id, key_id);
        assert!(h
            .cp
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
        h.settle(&op).await;
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

#[tokio::test]
async fn api_keys_are_created_once_per_call_and_orgs_validated() {
    as_system(async {
        let h = Harness::new().await;
        assert_eq!(
            code(
                h.cp.create_org(CreateOrgRequest {
                    id: "Bad Id".into(),
                    ..Default::default()
                })
                .await
            ),
            ErrorCode::InvalidArgument
        );
        h.cp.create_org(CreateOrgRequest {
            id: "x".into(),
            ..Default::default()
        })
        .await
        .expect("org");
        assert_eq!(
            code(
                h.cp.create_org(CreateOrgRequest {
                    id: "x".into(),
                    ..Default::default()
                })
                .await
            ),
            ErrorCode::AlreadyExists
        );
        let one =
            h.cp.create_api_key("x", CreateApiKeyRequest::default())
                .await
                .expect("key");
        let two =
            h.cp.create_api_key("x", CreateApiKeyRequest::default())
                .await
                .expect("key");
        assert_ne!(one.secret, two.secret);
        assert_eq!(
            code(
                h.cp.create_api_key("nope", CreateApiKeyRequest::default())
                    .await
            ),
            ErrorCode::NotFound
        );
        let c = h.cp.authenticate(&one.secret).await.expect("auth");
        assert_eq!(
            (c.org.as_str(), c.actor),
            ("x", Actor::Key(one.key.id.clone()))
        );
    })
    .await;
}
