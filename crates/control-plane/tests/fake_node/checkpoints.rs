//! Checkpoints, rollback, fork and create from a checkpoint over the fake node: the
//! checkpoint's files come back, the sandbox keeps running while one is taken, forks are new
//! sandboxes, disabled features answer `feature_disabled`.

use bytes::Bytes;
use cove_api_types::{
    CheckpointState, CreateCheckpointRequest, CreateSandboxRequest, ErrorCode, ForkRequest,
    OperationKind, OperationState, ResourcesRequest, RollbackRequest, SandboxState,
};
use cove_control_plane::{Feature, Features, ReadOptions, SandboxPath, WriteOptions};
use cove_node_api::{NodeError, NodeSandboxState};
use cove_test_support::{Call, FakeNode, Fault};
use futures::StreamExt;

use crate::harness::as_system;
use crate::harness::{code, Harness};

async fn write(h: &Harness, id: &str, path: &str, data: &'static [u8]) {
    let q = SandboxPath(path.as_bytes().to_vec());
    let body = futures::stream::iter([Ok(Bytes::from_static(data))]).boxed();
    h.cp.write_file(id, q, None, WriteOptions::default(), None, body)
        .await
        .expect("write");
}

async fn read(h: &Harness, id: &str, path: &str) -> Option<Vec<u8>> {
    let q = SandboxPath(path.as_bytes().to_vec());
    let (_, mut body) =
        h.cp.read_file(id, q, None, ReadOptions::default())
            .await
            .ok()?;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.expect("chunk"));
    }
    Some(out)
}

/// A ready checkpoint of `id`; returns its id.
async fn checkpoint(h: &Harness, id: &str) -> String {
    let r =
        h.cp.create_checkpoint(id, CreateCheckpointRequest::default(), None)
            .await
            .expect("checkpoint");
    assert_eq!(r.checkpoint.state, CheckpointState::Creating);
    assert_eq!(r.operation.kind, OperationKind::CheckpointSandbox);
    h.succeeds(&r.operation).await;
    r.checkpoint.id
}

#[tokio::test]
async fn rollback_brings_back_the_checkpoints_files_and_ends_commands() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        write(&h, &id, "/home/user/f.txt", b"before").await;
        let r =
            h.cp.create_checkpoint(
                &id,
                CreateCheckpointRequest {
                    name: Some("first".into()),
                },
                Some("k1".into()),
            )
            .await
            .expect("checkpoint");
        // The same key and body: the same checkpoint and operation.
        let again =
            h.cp.create_checkpoint(
                &id,
                CreateCheckpointRequest {
                    name: Some("first".into()),
                },
                Some("k1".into()),
            )
            .await
            .expect("replay");
        assert_eq!(again.checkpoint.id, r.checkpoint.id);
        assert_eq!(again.operation.id, r.operation.id);
        h.succeeds(&r.operation).await;
        let ck = h.cp.get_checkpoint(&r.checkpoint.id).await.expect("get");
        assert_eq!(ck.state, CheckpointState::Ready);
        assert_eq!(ck.name.as_deref(), Some("first"));
        assert_eq!(ck.file_bytes, 6);
        assert!(ck.pause_ms.is_some());
        // The sandbox kept running.
        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Running));
        assert_eq!(h.node.checkpoint_ids(), vec![ck.id.clone()]);

        write(&h, &id, "/home/user/f.txt", b"after!!").await;
        write(&h, &id, "/home/user/new.txt", b"new").await;
        let cmd =
            h.cp.create_command(
                &id,
                cove_api_types::CreateCommandRequest {
                    shell: Some("sleep 1000".into()),
                    ..Default::default()
                },
            )
            .await
            .expect("command");
        let op =
            h.cp.rollback(
                &id,
                RollbackRequest {
                    checkpoint: ck.id.clone(),
                    deadline_s: None,
                },
                None,
            )
            .await
            .expect("rollback");
        assert_eq!(op.kind, OperationKind::RollbackSandbox);
        h.succeeds(&op).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert_eq!(
            read(&h, &id, "/home/user/f.txt").await.as_deref(),
            Some(&b"before"[..])
        );
        assert_eq!(read(&h, &id, "/home/user/new.txt").await, None);
        // The command from after the checkpoint is gone with the processes.
        assert_eq!(
            code(h.cp.get_command(&id, &cmd.command.id, None).await),
            ErrorCode::CommandNotFound
        );
        assert_eq!(h.sandbox(&id).await.memory_restored, Some(false));

        let list = h.cp.list_checkpoints(Some(&id)).await.expect("list");
        assert_eq!(list.checkpoints.len(), 1);
        h.cp.delete_checkpoint(&ck.id).await.expect("delete");
        assert!(h.node.checkpoint_ids().is_empty());
        let gone =
            h.cp.rollback(
                &id,
                RollbackRequest {
                    checkpoint: ck.id.clone(),
                    deadline_s: None,
                },
                None,
            )
            .await;
        assert_eq!(code(gone), ErrorCode::CheckpointNotFound);
    })
    .await;
}

#[tokio::test]
async fn fork_makes_new_sandboxes_with_the_parents_files() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        write(&h, &id, "/home/user/state", b"prepared").await;
        let r =
            h.cp.fork(
                &id,
                ForkRequest {
                    count: 3,
                    metadata: [("attempt".to_string(), "x".to_string())].into(),
                },
            )
            .await
            .expect("fork");
        assert_eq!(r.sandboxes.len(), 3);
        h.succeeds(&r.operation).await;
        let mut ids = std::collections::BTreeSet::new();
        for fork in &r.sandboxes {
            h.succeeds(&fork.operation).await;
            let s = h.sandbox(&fork.sandbox.id).await;
            assert_eq!(s.state, SandboxState::Running);
            assert_eq!(s.metadata.get("attempt").map(String::as_str), Some("x"));
            assert_ne!(s.id, id);
            ids.insert(s.id.clone());
            assert_eq!(
                read(&h, &s.id, "/home/user/state").await.as_deref(),
                Some(&b"prepared"[..])
            );
        }
        assert_eq!(ids.len(), 3);
        // The parent runs on, and its later writes are its own.
        assert_eq!(h.state(&id).await, SandboxState::Running);
        write(&h, &id, "/home/user/state", b"parent").await;
        let first = &r.sandboxes[0].sandbox.id;
        assert_eq!(
            read(&h, first, "/home/user/state").await.as_deref(),
            Some(&b"prepared"[..])
        );
        for bad in [0, 17] {
            let req = ForkRequest {
                count: bad,
                ..Default::default()
            };
            assert_eq!(code(h.cp.fork(&id, req).await), ErrorCode::InvalidArgument);
        }
    })
    .await;
}

#[tokio::test]
async fn a_failed_checkpoint_fails_its_forks_and_keeps_nothing() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::Checkpoint,
            Fault::fail(NodeError::Runtime("disk".into())),
        );
        let r =
            h.cp.fork(
                &id,
                ForkRequest {
                    count: 2,
                    ..Default::default()
                },
            )
            .await
            .expect("fork");
        h.ends(&r.operation, OperationState::Failed, ErrorCode::Internal)
            .await;
        for fork in &r.sandboxes {
            h.ends(
                &fork.operation,
                OperationState::Failed,
                ErrorCode::FailedPrecondition,
            )
            .await;
            assert_eq!(h.state(&fork.sandbox.id).await, SandboxState::Failed);
        }
        let ck = h.cp.get_checkpoint(&r.checkpoint.id).await.expect("get");
        assert_eq!(ck.state, CheckpointState::Failed);
        assert!(h.node.checkpoint_ids().is_empty());
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn a_sandbox_is_created_from_a_checkpoint_after_its_source_is_gone() {
    as_system(async {
        let h = Harness::new().await;
        let id = h
            .running_with(CreateSandboxRequest {
                env: [("FROM".to_string(), "source".to_string())].into(),
                ..Default::default()
            })
            .await;
        write(&h, &id, "/home/user/data", b"kept").await;
        let ck = checkpoint(&h, &id).await;
        h.cp.delete_sandbox(&id, None).await.expect("delete");
        crate::harness::eventually("source deleted", || async {
            h.sandbox(&id).await.state == SandboxState::Deleted
        })
        .await;

        let mixed = CreateSandboxRequest {
            checkpoint: Some(ck.clone()),
            resources: Some(ResourcesRequest::default()),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(mixed, None).await),
            ErrorCode::InvalidArgument
        );
        let unknown = CreateSandboxRequest {
            checkpoint: Some("ck-0000000000000000".into()),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(unknown, None).await),
            ErrorCode::CheckpointNotFound
        );
        let new = h
            .running_with(CreateSandboxRequest {
                checkpoint: Some(ck.clone()),
                ..Default::default()
            })
            .await;
        assert_eq!(
            read(&h, &new, "/home/user/data").await.as_deref(),
            Some(&b"kept"[..])
        );
        let s = h.sandbox(&new).await;
        assert_eq!(s.env.get("FROM").map(String::as_str), Some("source"));
        // Its checkpoints are still listed after the sandbox is deleted.
        let list = h.cp.list_checkpoints(Some(&id)).await.expect("list");
        assert_eq!(list.checkpoints.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn checkpoints_need_a_running_or_paused_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, cove_control_plane::LifecycleVerb::Suspend)
            .await;
        let r =
            h.cp.create_checkpoint(&id, CreateCheckpointRequest::default(), None)
                .await;
        assert_eq!(code(r), ErrorCode::SandboxNotRunning);
        let bad_name =
            h.cp.create_checkpoint(
                &id,
                CreateCheckpointRequest {
                    name: Some("a\nb".into()),
                },
                None,
            )
            .await;
        assert_eq!(code(bad_name), ErrorCode::InvalidArgument);
    })
    .await;
}

#[tokio::test]
async fn a_disabled_fork_answers_feature_disabled() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.features = Features::all();
            cfg.features.disable(Feature::Fork);
        })
        .await;
        let id = h.running().await;
        let fork =
            h.cp.fork(
                &id,
                ForkRequest {
                    count: 1,
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(code(fork), ErrorCode::FeatureDisabled);
        // Checkpoints stay on.
        checkpoint(&h, &id).await;
    })
    .await;
}

#[tokio::test]
async fn disabled_checkpoints_answer_feature_disabled() {
    as_system(async {
        let h2 = Harness::with(FakeNode::new(), |cfg| {
            cfg.features = Features::disabling("checkpoints").expect("features");
        })
        .await;
        let id2 = h2.running().await;
        let r = h2
            .cp
            .create_checkpoint(&id2, CreateCheckpointRequest::default(), None)
            .await;
        assert_eq!(code(r), ErrorCode::FeatureDisabled);
        assert_eq!(
            code(h2.cp.list_checkpoints(None).await),
            ErrorCode::FeatureDisabled
        );
        let from = CreateSandboxRequest {
            checkpoint: Some("ck-0000000000000000".into()),
            ..Default::default()
        };
        assert_eq!(
            code(h2.cp.create_sandbox(from, None).await),
            ErrorCode::FeatureDisabled
        );
        let rb = h2
            .cp
            .rollback(
                &id2,
                RollbackRequest {
                    checkpoint: "ck-0000000000000000".into(),
                    deadline_s: None,
                },
                None,
            )
            .await;
        assert_eq!(code(rb), ErrorCode::FeatureDisabled);
    })
    .await;
}

#[tokio::test]
async fn archives_round_trip_and_a_disabled_export_answers_feature_disabled() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.features = Features::disabling("export").expect("features");
        })
        .await;
        let id = h.running().await;
        let ck = checkpoint(&h, &id).await;
        assert_eq!(
            code(h.cp.export_checkpoint(&ck).await.map(|(c, _)| c)),
            ErrorCode::FeatureDisabled
        );
        let body = futures::stream::iter([Ok(Bytes::from_static(b"x"))]).boxed();
        assert_eq!(
            code(h.cp.import_checkpoint(body, None).await),
            ErrorCode::FeatureDisabled
        );
    })
    .await;
}

#[tokio::test]
async fn an_imported_checkpoint_creates_sandboxes_and_bad_headers_are_refused() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        write(&h, &id, "/home/user/a", b"archived").await;
        let ck = checkpoint(&h, &id).await;
        let (_, body) = h.cp.export_checkpoint(&ck).await.expect("export");
        let imported =
            h.cp.import_checkpoint(body, Some("copy".into()))
                .await
                .expect("import");
        assert_eq!(imported.state, CheckpointState::Ready);
        assert_eq!(imported.operation_id, None);
        assert_eq!(imported.name.as_deref(), Some("copy"));
        let new = h
            .running_with(CreateSandboxRequest {
                checkpoint: Some(imported.id.clone()),
                ..Default::default()
            })
            .await;
        assert_eq!(
            read(&h, &new, "/home/user/a").await.as_deref(),
            Some(&b"archived"[..])
        );

        // A header whose resources are out of bounds is refused, and nothing is kept.
        let (_, body) = h.cp.export_checkpoint(&ck).await.expect("export");
        let mut all = Vec::new();
        let mut body = body;
        while let Some(chunk) = body.next().await {
            all.extend_from_slice(&chunk.expect("chunk"));
        }
        let text = String::from_utf8(all).expect("fake archives are text");
        let bad = text.replacen("\"vcpus\": 1", "\"vcpus\": 4096", 1);
        assert_ne!(bad, text, "the header names vcpus");
        let before = h.node.checkpoint_ids().len();
        let body = futures::stream::iter([Ok(Bytes::from(bad))]).boxed();
        assert_eq!(
            code(h.cp.import_checkpoint(body, None).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(h.node.checkpoint_ids().len(), before);
    })
    .await;
}
