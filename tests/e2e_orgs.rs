//! Orgs against a real server: two orgs with their own API keys each create a sandbox, each
//! sees only its own, another org's sandbox answers 404 on exec, files and the data plane's
//! attachment route, and a quota answers 429 with `Retry-After`. A feature turned off for one
//! org answers 403 `feature_disabled` to that org's key only.

use cove_api_types::{
    CreateCheckpointRequest, CreateCommandRequest, CreateSandboxRequest, ErrorCode, Feature,
    ForkRequest, Quotas, UpdateOrgRequest,
};
use cove_client::{Client, ListSandboxes};
use cove_e2e::{client, delete, ensure_template, sandbox, server};

fn org_id(tag: &str) -> String {
    format!("{tag}-{}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_orgs_see_only_their_own_and_quotas_answer_429() {
    let s = server();
    let admin = client();
    // Built-in templates are shared; the admin builds their releases.
    ensure_template(&admin, "tiny").await;

    let (a, b) = (org_id("org-a"), org_id("org-b"));
    admin
        .create_org(&a, Quotas::default())
        .await
        .expect("org a");
    let quota = Quotas {
        max_running: Some(1),
        ..Quotas::default()
    };
    admin.create_org(&b, quota).await.expect("org b");
    let key_a = admin.create_api_key(&a, "e2e").await.expect("key a");
    let key_b = admin.create_api_key(&b, "e2e").await.expect("key b");
    let ca = Client::new(&s.api_url, key_a.secret.clone()).expect("client a");
    let cb = Client::new(&s.api_url, key_b.secret.clone()).expect("client b");

    let sa = sandbox(&ca, "tiny").await;
    let sb = sandbox(&cb, "tiny").await;
    assert_eq!(ca.get_sandbox(&sa).await.expect("own").org, a);

    // Each sees only its own; the admin (default org) sees neither.
    let ids = |c: &Client| {
        let c = c.clone();
        async move {
            c.list_sandboxes(&ListSandboxes::default())
                .await
                .expect("list")
                .sandboxes
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(&ca).await, std::slice::from_ref(&sa));
    assert_eq!(ids(&cb).await, std::slice::from_ref(&sb));
    let mine = ids(&admin).await;
    assert!(!mine.contains(&sa) && !mine.contains(&sb), "{mine:?}");

    // Cross-org exec, files and data plane: 404.
    let true_cmd = CreateCommandRequest {
        argv: Some(vec!["true".into()]),
        ..Default::default()
    };
    let err = cb
        .create_command(&sa, &true_cmd)
        .await
        .expect_err("b cannot exec in a's sandbox");
    assert_eq!(err.status(), Some(404), "{err}");
    let err = cb
        .read_file(&sa, "/etc/hostname")
        .await
        .expect_err("b cannot read a's files");
    assert_eq!(err.status(), Some(404), "{err}");
    let started = ca.create_command(&sa, &true_cmd).await.expect("a execs");
    let err = cb
        .new_attachment(&sa, &started.command.id)
        .await
        .expect_err("b cannot attach to a's command");
    assert_eq!(err.status(), Some(404), "{err}");
    // b's key is no attachment token on the data plane either.
    let resp = reqwest::Client::new()
        .get(&started.attachment.url)
        .bearer_auth(&key_b.secret)
        .send()
        .await
        .expect("send");
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let err = cb.get_sandbox(&sa).await.expect_err("not found");
    assert_eq!(err.status(), Some(404));

    // b is at max_running: another create is 429 quota_exceeded with Retry-After.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sandboxes", s.api_url))
        .bearer_auth(&key_b.secret)
        .json(&CreateSandboxRequest {
            template: Some("tiny".into()),
            ..Default::default()
        })
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 429);
    assert!(resp.headers().get("retry-after").is_some());
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["code"], "quota_exceeded");
    assert!(body["message"]
        .as_str()
        .unwrap_or_default()
        .contains("max_running"));

    // The audit log has b's refused create.
    let page = cb.audit(0, None, None).await.expect("audit");
    assert!(page
        .entries
        .iter()
        .any(|e| e.outcome == "quota_exceeded" && e.org == b));

    delete(&ca, &sa).await;
    delete(&cb, &sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feature_off_for_one_org_answers_403_to_that_org_only() {
    let s = server();
    let admin = client();
    ensure_template(&admin, "tiny").await;
    let (gated, open) = (org_id("gated"), org_id("open"));
    admin
        .create_org(&gated, Quotas::default())
        .await
        .expect("org");
    admin
        .create_org(&open, Quotas::default())
        .await
        .expect("org");
    let off = UpdateOrgRequest {
        disabled_features: Some(vec![Feature::Fork, Feature::Checkpoints]),
        ..Default::default()
    };
    let org = admin.update_org(&gated, &off).await.expect("update");
    assert_eq!(org.disabled_features, [Feature::Checkpoints, Feature::Fork]);
    let key_g = admin.create_api_key(&gated, "e2e").await.expect("key");
    let key_o = admin.create_api_key(&open, "e2e").await.expect("key");
    let cg = Client::new(&s.api_url, key_g.secret).expect("client");
    let co = Client::new(&s.api_url, key_o.secret).expect("client");
    let sg = sandbox(&cg, "tiny").await;
    let so = sandbox(&co, "tiny").await;

    let fork = ForkRequest {
        count: 1,
        ..Default::default()
    };
    let err = cg.fork_sandbox(&sg, &fork).await.expect_err("fork is off");
    assert_eq!(err.status(), Some(403));
    let body = err.api_body().expect("error body");
    assert_eq!(body.code, ErrorCode::FeatureDisabled);
    assert!(
        body.message.contains("fork") && body.message.contains(&gated),
        "{}",
        body.message
    );
    assert!(!body.request_id.is_empty());
    let err = cg
        .create_checkpoint(&sg, &CreateCheckpointRequest::default(), None)
        .await
        .expect_err("checkpoints are off");
    assert_eq!(
        err.api_body().expect("body").code,
        ErrorCode::FeatureDisabled
    );

    // The other org checkpoints as usual.
    let made = co
        .create_checkpoint(&so, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint of the open org");
    let op = co
        .wait_operation(&made.operation.id, std::time::Duration::from_secs(120))
        .await
        .expect("wait");
    assert_eq!(op.state, cove_api_types::OperationState::Succeeded);
    co.delete_checkpoint(&made.checkpoint.id)
        .await
        .expect("delete checkpoint");
    delete(&cg, &sg).await;
    delete(&co, &so).await;
}
