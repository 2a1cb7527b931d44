//! Per-org settings over the fake node: features turned off for one org answer `403
//! feature_disabled` to that org only (the server's `--disable-feature` still turns them off
//! for all), `PATCH /v1/orgs/{org}` replaces only what it names and is admin-only, and the
//! controller deletes an org's checkpoints past its retention, oldest first, from the store
//! and the snapshot store.

use std::time::Duration;

use cove_api_types::{
    CheckpointRetention, CreateCheckpointRequest, CreateOrgRequest, CreateSandboxRequest,
    CreateVolumeRequest, ErrorCode, Feature, ForkRequest, Quotas, RollbackRequest,
    UpdateOrgRequest,
};
use cove_control_plane::Features;
use cove_test_support::{Call, FakeNode};

use crate::harness::{as_org, as_system};
use crate::harness::{code, Harness};

async fn org(h: &Harness, id: &str, disabled: &[Feature]) {
    h.cp.create_org(CreateOrgRequest {
        id: id.into(),
        disabled_features: disabled.to_vec(),
        ..Default::default()
    })
    .await
    .expect("org");
}

/// A running sandbox of `org`.
async fn running_in(h: &Harness, org: &str) -> String {
    let r = as_org(
        org,
        h.cp.create_sandbox(CreateSandboxRequest::default(), None),
    )
    .await
    .expect("create");
    h.succeeds(&r.operation).await;
    r.sandbox.id
}

/// A ready checkpoint of sandbox `id` of `org`.
async fn checkpoint_in(h: &Harness, org: &str, id: &str) -> String {
    let r = as_org(
        org,
        h.cp.create_checkpoint(id, CreateCheckpointRequest::default(), None),
    )
    .await
    .expect("checkpoint");
    h.succeeds(&r.operation).await;
    r.checkpoint.id
}

fn fork_one() -> ForkRequest {
    ForkRequest {
        count: 1,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_feature_off_for_one_org_answers_403_to_it_only() {
    as_system(async {
        let h = Harness::new().await;
        org(&h, "gated", &[Feature::Fork, Feature::Volumes]).await;
        org(&h, "open", &[]).await;
        let gated = running_in(&h, "gated").await;
        let open = running_in(&h, "open").await;

        let refused = as_org("gated", h.cp.fork(&gated, fork_one())).await;
        let e = refused.expect_err("fork is off for gated");
        assert_eq!(e.code(), ErrorCode::FeatureDisabled);
        assert!(e.public_message().contains("fork"), "{e}");
        assert!(e.public_message().contains("gated"), "{e}");
        // The admin token acting on the gated org's sandbox is refused too.
        assert_eq!(
            code(h.cp.fork(&gated, fork_one()).await),
            ErrorCode::FeatureDisabled
        );
        let vol = CreateVolumeRequest {
            name: "data".into(),
            size_mib: 64,
            storage: Default::default(),
        };
        assert_eq!(
            code(as_org("gated", h.cp.create_volume(vol.clone())).await),
            ErrorCode::FeatureDisabled
        );
        assert_eq!(
            code(as_org("gated", h.cp.list_volumes()).await),
            ErrorCode::FeatureDisabled
        );
        // Features the org keeps still work for it: checkpoints.
        checkpoint_in(&h, "gated", &gated).await;

        // The other org has every feature.
        let forked = as_org("open", h.cp.fork(&open, fork_one()))
            .await
            .expect("fork of open");
        h.succeeds(&forked.sandboxes[0].operation).await;
        as_org("open", h.cp.create_volume(vol.clone()))
            .await
            .expect("volume of open");

        // Turned back on, the gated org forks.
        let org =
            h.cp.update_org(
                "gated",
                UpdateOrgRequest {
                    disabled_features: Some(vec![Feature::Checkpoints]),
                    ..Default::default()
                },
            )
            .await
            .expect("update");
        assert_eq!(org.disabled_features, [Feature::Checkpoints]);
        // ... but now checkpoints are off for it: taking, listing, rolling back.
        assert_eq!(
            code(
                as_org(
                    "gated",
                    h.cp.create_checkpoint(&gated, CreateCheckpointRequest::default(), None)
                )
                .await
            ),
            ErrorCode::FeatureDisabled
        );
        assert_eq!(
            code(as_org("gated", h.cp.list_checkpoints(None)).await),
            ErrorCode::FeatureDisabled
        );
        let rb = RollbackRequest {
            checkpoint: "ck-0000000000000000".into(),
            deadline_s: None,
        };
        assert_eq!(
            code(as_org("gated", h.cp.rollback(&gated, rb, None)).await),
            ErrorCode::FeatureDisabled
        );
        as_org("gated", h.cp.create_volume(vol))
            .await
            .expect("volumes back on for gated");
        // The open org is untouched.
        checkpoint_in(&h, "open", &open).await;
    })
    .await;
}

#[tokio::test]
async fn the_server_flag_still_turns_a_feature_off_for_every_org() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.features = Features::disabling("fork").expect("features");
        })
        .await;
        org(&h, "open", &[]).await;
        let id = running_in(&h, "open").await;
        let e = as_org("open", h.cp.fork(&id, fork_one()))
            .await
            .expect_err("fork is off on the server");
        assert_eq!(e.code(), ErrorCode::FeatureDisabled);
        assert!(e.public_message().contains("server"), "{e}");
    })
    .await;
}

#[tokio::test]
async fn org_updates_replace_what_they_name_and_are_admin_only() {
    as_system(async {
        let h = Harness::new().await;
        let quotas = Quotas {
            max_running: Some(5),
            ..Quotas::default()
        };
        h.cp.create_org(CreateOrgRequest {
            id: "acme".into(),
            quotas,
            disabled_features: vec![Feature::Export],
            ..Default::default()
        })
        .await
        .expect("org");
        let retention = CheckpointRetention {
            max_per_sandbox: Some(2),
            max_age_s: None,
        };
        let got =
            h.cp.update_org(
                "acme",
                UpdateOrgRequest {
                    checkpoint_retention: Some(retention),
                    ..Default::default()
                },
            )
            .await
            .expect("update");
        assert_eq!(got.checkpoint_retention, retention);
        assert_eq!(got.disabled_features, [Feature::Export], "kept");
        assert_eq!(got.quotas, quotas, "kept");

        for bad in [
            CheckpointRetention {
                max_per_sandbox: Some(0),
                max_age_s: None,
            },
            CheckpointRetention {
                max_per_sandbox: None,
                max_age_s: Some(59),
            },
        ] {
            let req = UpdateOrgRequest {
                checkpoint_retention: Some(bad),
                quotas: Some(Quotas::default()),
                ..Default::default()
            };
            assert_eq!(
                code(h.cp.update_org("acme", req).await),
                ErrorCode::InvalidArgument
            );
        }
        // A MiB quota must fit the store's signed 64-bit integers, through every route.
        let huge = Quotas {
            max_snapshot_mib: Some(1 << 63),
            ..Quotas::default()
        };
        let req = UpdateOrgRequest {
            quotas: Some(huge),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.update_org("acme", req).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(h.cp.set_org_quotas("acme", huge).await),
            ErrorCode::InvalidArgument
        );
        // An audit cursor past every sequence number lists nothing (no store error).
        let page = h.cp.list_audit(u64::MAX, None, None).await.expect("audit");
        assert!(page.entries.is_empty());
        let unchanged = h.cp.get_org("acme").await.expect("get");
        assert_eq!(
            unchanged.quotas, quotas,
            "nothing changed by a refused update"
        );
        assert_eq!(unchanged.checkpoint_retention, retention);

        assert_eq!(
            code(h.cp.update_org("nope", UpdateOrgRequest::default()).await),
            ErrorCode::NotFound
        );
        assert_eq!(
            code(as_org("acme", h.cp.update_org("acme", UpdateOrgRequest::default())).await),
            ErrorCode::Forbidden
        );
    })
    .await;
}

#[tokio::test]
async fn the_controller_deletes_checkpoints_past_the_orgs_retention_oldest_first() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.controller_interval = Duration::from_secs(1);
        })
        .await;
        h.cp.create_org(CreateOrgRequest {
            id: "kept".into(),
            checkpoint_retention: CheckpointRetention {
                max_per_sandbox: Some(2),
                max_age_s: Some(3600),
            },
            ..Default::default()
        })
        .await
        .expect("org");
        org(&h, "forever", &[]).await;
        let a = running_in(&h, "kept").await;
        let b = running_in(&h, "kept").await;
        let other = running_in(&h, "forever").await;
        let mut of_a = Vec::new();
        for _ in 0..4 {
            of_a.push(checkpoint_in(&h, "kept", &a).await);
            h.advance(Duration::from_millis(5)).await;
        }
        let of_b = checkpoint_in(&h, "kept", &b).await;
        let mut of_other = Vec::new();
        for _ in 0..3 {
            of_other.push(checkpoint_in(&h, "forever", &other).await);
        }

        h.controller_pass().await;
        let left = |sandbox: &str| {
            let sandbox = sandbox.to_string();
            let cp = h.cp.clone();
            async move {
                let mut ids: Vec<String> = cp
                    .list_checkpoints(Some(&sandbox))
                    .await
                    .expect("list")
                    .checkpoints
                    .into_iter()
                    .map(|c| c.id)
                    .collect();
                ids.reverse();
                ids
            }
        };
        // The two newest of `a` stay; the two oldest are gone from the store and the node.
        assert_eq!(left(&a).await, of_a[2..]);
        for gone in &of_a[..2] {
            assert_eq!(h.node.count_on(Call::DeleteCheckpoint, gone), 1, "{gone}");
        }
        assert_eq!(left(&b).await, std::slice::from_ref(&of_b));
        assert_eq!(
            left(&other).await,
            of_other,
            "an org without retention keeps all"
        );

        // Past the age limit every checkpoint of the org goes; the other org's stay.
        h.advance(Duration::from_secs(3601)).await;
        h.controller_pass().await;
        assert!(left(&a).await.is_empty());
        assert!(left(&b).await.is_empty());
        assert_eq!(h.node.count_on(Call::DeleteCheckpoint, &of_b), 1);
        assert_eq!(left(&other).await, of_other);
    })
    .await;
}
