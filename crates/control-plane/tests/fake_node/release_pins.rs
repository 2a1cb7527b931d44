//! Releases by digest: every built release gets a content digest, a create can pin
//! `template:N` or `template@sha256:…`, and every sandbox reports the resolved number and
//! digest.

use cove_api_types::{CreateSandboxRequest, ErrorCode, OperationState};
use cove_test_support::fake_digest;

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn on(template: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        template: Some(template.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn creates_pin_a_release_by_number_or_digest() {
    as_system(async {
        let h = Harness::new().await;
        let digest = fake_digest("base");
        let built =
            h.cp.build_release("base", Default::default())
                .await
                .expect("build 2");
        assert_eq!(
            h.settle(&built.operation.id).await.state,
            OperationState::Succeeded
        );
        let releases = h.cp.get_template("base").await.expect("template").releases;
        assert_eq!(releases.len(), 2);
        assert!(releases
            .iter()
            .all(|r| r.digest.as_deref() == Some(digest.as_str())));

        let latest = h.running().await;
        let s = h.sandbox(&latest).await;
        assert_eq!(
            (s.release, s.release_digest.as_deref()),
            (2, Some(digest.as_str()))
        );
        let first = h.running_with(on("base:1")).await;
        assert_eq!(h.sandbox(&first).await.release, 1);
        // The same inputs built twice have one digest: the pin takes the newest of them.
        let pinned = h.running_with(on(&format!("base@{digest}"))).await;
        let s = h.sandbox(&pinned).await;
        assert_eq!((s.template.as_str(), s.release), ("base", 2));
        assert_eq!(s.release_digest.as_deref(), Some(digest.as_str()));

        let unknown = format!("base@sha256:{}", "0".repeat(64));
        assert_eq!(
            code(h.cp.create_sandbox(on(&unknown), None).await),
            ErrorCode::ReleaseNotFound
        );
        assert_eq!(
            code(h.cp.create_sandbox(on("base:7"), None).await),
            ErrorCode::ReleaseNotFound
        );
        for bad in ["base:x", "base@sha256:abc", "base@latest"] {
            assert_eq!(
                code(h.cp.create_sandbox(on(bad), None).await),
                ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
        let disagree = CreateSandboxRequest {
            release: Some(1),
            ..on("base:2")
        };
        assert_eq!(
            code(h.cp.create_sandbox(disagree, None).await),
            ErrorCode::InvalidArgument
        );
    })
    .await;
}
