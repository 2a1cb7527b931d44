//! Release digests on a real node: `tiny` built twice from the same inputs, once from the
//! build cache and once afresh, has one digest, and a sandbox pinned to it by digest or by
//! number reports the release it resolved to.

use std::time::Duration;

use cove_api_types::{BuildReleaseRequest, CreateSandboxRequest, OperationState};
use cove_e2e::{client, delete, ensure_template, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_inputs_same_digest_and_sandboxes_pin_it() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let fresh = c
        .build_release("tiny", &BuildReleaseRequest { no_cache: true })
        .await
        .expect("build");
    let op = c
        .wait_operation(&fresh.operation.id, Duration::from_secs(300))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let releases = c.template("tiny").await.expect("template").releases;
    let digests: Vec<&str> = releases
        .iter()
        .filter_map(|r| r.digest.as_deref())
        .collect();
    assert!(digests.len() >= 2, "{releases:?}");
    assert!(digests[0].starts_with("sha256:") && digests[0].len() == 71);
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    let digest = digests[0].to_string();
    let newest = releases.iter().map(|r| r.number).max().expect("a release");

    for (pin, number) in [
        (format!("tiny@{digest}"), newest),
        ("tiny:1".to_string(), 1),
    ] {
        let resp = c
            .create_sandbox(
                &CreateSandboxRequest {
                    template: Some(pin.clone()),
                    ..Default::default()
                },
                None,
            )
            .await
            .expect("create");
        let op = c
            .wait_operation(&resp.operation.id, Duration::from_secs(120))
            .await
            .expect("create ends");
        assert_eq!(op.state, OperationState::Succeeded, "{pin}: {:?}", op.error);
        let s = c.get_sandbox(&resp.sandbox.id).await.expect("get");
        assert_eq!((s.template.as_str(), s.release), ("tiny", number), "{pin}");
        assert_eq!(s.release_digest.as_deref(), Some(digest.as_str()));
        assert_eq!(sh(&c, &s.id, "echo pinned").await.stdout_text(), "pinned\n");
        delete(&c, &s.id).await;
    }
}
