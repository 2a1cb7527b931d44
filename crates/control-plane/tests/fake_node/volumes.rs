//! Persistent volumes over the fake node: create, get, list, delete (`volume_exists`,
//! `volume_in_use`), the checks of `volumes` on a create, the node getting each mount with
//! the volume's id at create and wake, and where volumes are not offered: a disabled feature
//! (`403 feature_disabled`), a node that cannot mount them (`400 unsupported`). Volumes on a
//! cluster: `volumes_nodes.rs`.

use cove_api_types::{CreateSandboxRequest, CreateVolumeRequest, ErrorCode, VolumeMount};
use cove_control_plane::{Feature, LifecycleVerb};
use cove_node_api::NodeCapabilities;
use cove_test_support::FakeNode;

use crate::harness::as_system;
use crate::harness::{code, Harness};

/// Mounts of a create: `(volume, path, read_only)`.
type Mounts = &'static [(&'static str, &'static str, bool)];

fn volume(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_mib: 64,
        storage: Default::default(),
    }
}

fn mounting(mounts: &[(&str, &str, bool)]) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: mounts
            .iter()
            .map(|(name, path, read_only)| VolumeMount {
                name: (*name).into(),
                path: (*path).into(),
                read_only: *read_only,
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn volumes_are_made_mounted_and_deleted_only_when_unmounted() {
    as_system(async {
        let h = Harness::new().await;
        let v = h.cp.create_volume(volume("data")).await.expect("create");
        assert_eq!(
            (v.name.as_str(), v.size_mib, v.used_bytes),
            ("data", 64, Some(0))
        );
        assert_eq!(h.node.volume_ids().len(), 1);
        assert_eq!(
            code(h.cp.create_volume(volume("data")).await),
            ErrorCode::VolumeExists
        );
        for bad in [
            CreateVolumeRequest {
                name: "Data".into(),
                ..volume("x")
            },
            CreateVolumeRequest {
                size_mib: 1,
                ..volume("x")
            },
        ] {
            assert_eq!(
                code(h.cp.create_volume(bad).await),
                ErrorCode::InvalidArgument
            );
        }

        let id = h.running_with(mounting(&[("data", "/data", false)])).await;
        assert_eq!(h.cp.get_sandbox(&id).await.expect("get").volumes.len(), 1);
        let launch = h.node.launch_of(&id).expect("launched");
        assert_eq!(launch.volumes.len(), 1);
        assert_eq!(launch.volumes[0].id, h.node.volume_ids()[0]);
        assert_eq!(launch.volumes[0].path, "/data");
        assert_eq!(
            h.cp.get_volume("data").await.expect("get").mounted_by,
            vec![id.clone()]
        );
        assert_eq!(
            code(h.cp.delete_volume("data").await),
            ErrorCode::VolumeInUse
        );

        // A wake mounts it again.
        h.apply(&id, LifecycleVerb::Suspend).await;
        h.apply(&id, LifecycleVerb::Wake).await;
        assert_eq!(
            h.node.launch_of(&id).expect("woken").volumes,
            launch.volumes
        );

        let op = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.succeeds(&op).await;
        assert!(h
            .cp
            .get_volume("data")
            .await
            .expect("get")
            .mounted_by
            .is_empty());
        h.cp.delete_volume("data").await.expect("delete");
        assert!(h.node.volume_ids().is_empty());
        assert_eq!(
            code(h.cp.get_volume("data").await),
            ErrorCode::VolumeNotFound
        );
        assert!(h.cp.list_volumes().await.expect("list").volumes.is_empty());
    })
    .await;
}

#[tokio::test]
async fn mounts_on_create_are_checked() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.create_volume(volume("a")).await.expect("a");
        h.cp.create_volume(volume("b")).await.expect("b");
        let cases: [(Mounts, ErrorCode); 9] = [
            (&[("a", "rel", false)], ErrorCode::InvalidArgument),
            (&[("a", "/", false)], ErrorCode::InvalidArgument),
            (&[("a", "/proc/x", false)], ErrorCode::InvalidArgument),
            (&[("a", "/sys", false)], ErrorCode::InvalidArgument),
            (&[("a", "/dev/shm/v", false)], ErrorCode::InvalidArgument),
            (&[("a", "/x/../y", false)], ErrorCode::InvalidArgument),
            (
                &[("a", "/x", false), ("b", "/x", true)],
                ErrorCode::InvalidArgument,
            ),
            (
                &[("a", "/x", false), ("a", "/y", true)],
                ErrorCode::InvalidArgument,
            ),
            (&[("missing", "/x", false)], ErrorCode::VolumeNotFound),
        ];
        for (mounts, want) in cases {
            let got = code(h.cp.create_sandbox(mounting(mounts), None).await);
            assert_eq!(got, want, "{mounts:?}");
        }
        // Nothing was recorded by the refused creates.
        let listed =
            h.cp.list_sandboxes(None, None, Vec::new(), None, None)
                .await
                .expect("list");
        assert!(listed.sandboxes.is_empty());
        // Two volumes, one read-only, are fine.
        h.running_with(mounting(&[("a", "/x", false), ("b", "/y", true)]))
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_disabled_feature_answers_403_everywhere() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.features.disable(Feature::Volumes)
        })
        .await;
        assert_eq!(
            code(h.cp.create_volume(volume("data")).await),
            ErrorCode::FeatureDisabled
        );
        assert_eq!(code(h.cp.list_volumes().await), ErrorCode::FeatureDisabled);
        assert_eq!(
            code(h.cp.delete_volume("data").await),
            ErrorCode::FeatureDisabled
        );
        assert_eq!(
            code(
                h.cp.create_sandbox(mounting(&[("data", "/data", false)]), None)
                    .await
            ),
            ErrorCode::FeatureDisabled
        );
        assert!(!h.cp.capabilities().volumes);
        // Creates without volumes are not affected.
        h.running().await;
    })
    .await;
}

#[tokio::test]
async fn a_node_that_cannot_mount_volumes_refuses_them_with_unsupported() {
    as_system(async {
        let node = FakeNode::with_capabilities(NodeCapabilities {
            runtime: "qemu".into(),
            boundary: "vm".into(),
            pause: true,
            suspend_memory: true,
            snapshot_store: "file".into(),
            network: true,
            user_namespaces: false,
            volumes: false,
            attach_volumes: false,
        });
        let h = Harness::with(node, |_| {}).await;
        let err =
            h.cp.create_volume(volume("data"))
                .await
                .expect_err("refused");
        assert_eq!(err.code(), ErrorCode::Unsupported);
        assert!(err.to_string().contains("qemu"), "{err}");
        assert_eq!(
            code(
                h.cp.create_sandbox(mounting(&[("data", "/data", false)]), None)
                    .await
            ),
            ErrorCode::Unsupported
        );
        assert!(h.node.volume_ids().is_empty());
    })
    .await;
}

#[tokio::test]
async fn an_object_volume_on_one_server_is_uploaded_when_unmounted_and_fetched_again() {
    as_system(async {
        use LifecycleVerb::{Suspend, Wake};
        let h = Harness::new().await;
        let req = CreateVolumeRequest {
            storage: cove_api_types::VolumeStorage::Object,
            ..volume("remote")
        };
        let made = h.cp.create_volume(req).await.expect("create");
        assert_eq!(made.storage, cove_api_types::VolumeStorage::Object);
        let id = h.node.volume_ids()[0].clone();
        let sb = h
            .running_with(mounting(&[("remote", "/data", false)]))
            .await;
        // Suspended: uploaded (generation 1) and dropped from the node; woken: fetched again.
        h.apply(&sb, Suspend).await;
        assert!(h.node.volume_ids().is_empty());
        assert_eq!(FakeNode::stored_volume_generations(&id), [1]);
        h.apply(&sb, Wake).await;
        assert_eq!(h.node.volume_ids(), std::slice::from_ref(&id));
        let op = h.cp.delete_sandbox(&sb, None).await.expect("delete");
        h.succeeds(&op).await;
        assert_eq!(FakeNode::stored_volume_generations(&id), [2]);
        h.cp.delete_volume("remote").await.expect("delete");
        assert!(FakeNode::stored_volume_generations(&id).is_empty());
        assert_eq!(
            code(h.cp.get_volume("remote").await),
            ErrorCode::VolumeNotFound
        );
    })
    .await;
}

#[tokio::test]
async fn forks_mount_the_parents_volumes_and_from_checkpoint_creates_what_they_name() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.create_volume(volume("data")).await.expect("volume");
        h.cp.create_volume(volume("ro")).await.expect("volume");
        let parent = h
            .running_with(mounting(&[("data", "/data", false), ("ro", "/ro", true)]))
            .await;
        let parent_mounts = h.node.launch_of(&parent).expect("launched").volumes;

        let forked =
            h.cp.fork(
                &parent,
                cove_api_types::ForkRequest {
                    count: 2,
                    ..Default::default()
                },
            )
            .await
            .expect("fork");
        for f in &forked.sandboxes {
            h.succeeds(&f.operation).await;
            let s = h.cp.get_sandbox(&f.sandbox.id).await.expect("fork");
            assert_eq!(s.volumes, h.sandbox(&parent).await.volumes);
            assert_eq!(
                h.node.launch_of(&s.id).expect("fork launched").volumes,
                parent_mounts
            );
        }
        let mut users = h.cp.get_volume("data").await.expect("get").mounted_by;
        users.sort();
        let mut want: Vec<String> = forked
            .sandboxes
            .iter()
            .map(|f| f.sandbox.id.clone())
            .chain([parent.clone()])
            .collect();
        want.sort();
        assert_eq!(users, want);

        // A create from a checkpoint mounts only what it names.
        let from = CreateSandboxRequest {
            checkpoint: Some(forked.checkpoint.id.clone()),
            ..Default::default()
        };
        let bare = h.cp.create_sandbox(from, None).await.expect("create");
        h.succeeds(&bare.operation).await;
        assert!(h
            .node
            .launch_of(&bare.sandbox.id)
            .expect("bare")
            .volumes
            .is_empty());
        let from = CreateSandboxRequest {
            checkpoint: Some(forked.checkpoint.id.clone()),
            ..mounting(&[("ro", "/elsewhere", true)])
        };
        let named = h.cp.create_sandbox(from, None).await.expect("create");
        h.succeeds(&named.operation).await;
        let mounts = h.node.launch_of(&named.sandbox.id).expect("named").volumes;
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].path, "/elsewhere");
        assert!(mounts[0].read_only);
    })
    .await;
}

#[tokio::test]
async fn a_fork_of_a_sandbox_with_volumes_needs_the_volumes_feature() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.create_volume(volume("data")).await.expect("volume");
        let parent = h.running_with(mounting(&[("data", "/data", false)])).await;
        h.cp.update_org(
            cove_api_types::DEFAULT_ORG,
            cove_api_types::UpdateOrgRequest {
                disabled_features: Some(vec![Feature::Volumes]),
                ..Default::default()
            },
        )
        .await
        .expect("update");
        let fork =
            h.cp.fork(
                &parent,
                cove_api_types::ForkRequest {
                    count: 1,
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(code(fork), ErrorCode::FeatureDisabled);
        // A fork of a sandbox without volumes is not affected.
        let plain = h.running().await;
        let fork =
            h.cp.fork(
                &plain,
                cove_api_types::ForkRequest {
                    count: 1,
                    ..Default::default()
                },
            )
            .await
            .expect("fork");
        h.succeeds(&fork.sandboxes[0].operation).await;
    })
    .await;
}
