//! Volumes on a cluster of real processes: `cove server --no-local-node` and two `cove node`
//! agents (each in its own network namespace, runc, `--network off`, one shared snapshot
//! directory). A volume is made on one node (its image is in that node's data dir only) and
//! recorded with it; a sandbox that mounts it lands on that node, even when spread would pick
//! the other; a file written inside is read back through the volume files API (no sandbox,
//! over the node link) and by a second sandbox; stat, mkdir, chmod and rm go to the node too;
//! with the node drained a create that mounts the volume is refused (`503 unavailable` naming
//! the node) and a wake of a suspended one fails, leaving it suspended, while the volume's
//! files are still served; ready again, the node takes the wake although spread would pick
//! the other; then sandboxes and the volume are deleted.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cove_api_types::{
    CreateSandboxRequest, ErrorCode, MakeVolumeDirRequest, NodeState, OperationState, SandboxState,
    VolumeFileAttrs, VolumeMount,
};
use cove_client::ClientError;
use cove_e2e::{delete, sandbox, sandbox_with, sh};

mod cluster;
// Shared with nodes.rs, which also cuts links.
#[allow(dead_code)]
mod netns;
use cluster::{start, Snapshots};

const NODES: [&str; 2] = ["vn1", "vn2"];

fn mounting(name: &str, path: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: name.into(),
            path: path.into(),
            read_only: false,
        }],
        ..Default::default()
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (ErrorCode, String) {
    match r.expect_err("refused") {
        ClientError::Api { body, .. } => (body.code, body.message),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_lives_on_one_node_and_pins_the_sandboxes_that_mount_it() {
    let c = start(&NODES, Snapshots::Directory).await;
    // Always built: the harness's "built once" record is per process.
    cove_e2e::build_template(&c.client, "tiny").await;
    // Remote runc nodes report that they keep volumes, so the cluster offers them.
    assert!(c.client.capabilities().await.unwrap().volumes);

    let made = c.client.create_volume("shared", 64).await.unwrap();
    let home = made.node.clone().expect("recorded on a node");
    let other = NODES.into_iter().find(|n| *n != home).unwrap();
    let image_on = |node: &str| {
        std::fs::read_dir(c.root.join(node).join("volumes"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!((image_on(&home), image_on(other)), (1, 0));

    // A sandbox without volumes goes where spread puts it; one mounting the volume lands on
    // the volume's node whatever the spread.
    let plain = sandbox(&c.client, "tiny").await;
    let a = sandbox_with(&c.client, "tiny", mounting("shared", "/data")).await;
    assert_eq!(c.node_of(&a).unwrap(), home);
    let b = sandbox_with(&c.client, "tiny", mounting("shared", "/mnt/v")).await;
    assert_eq!(c.node_of(&b).unwrap(), home, "spread would pick {other}");

    // Written inside one sandbox, read through the files API (no sandbox) and by the other.
    let out = sh(
        &c.client,
        &a,
        "mkdir -p /data/in && echo from-a > /data/in/note",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert_eq!(
        c.client
            .read_volume_file("shared", "/in/note")
            .await
            .unwrap(),
        b"from-a\n"
    );
    let out = sh(&c.client, &b, "cat /mnt/v/in/note").await;
    assert_eq!(out.stdout_text(), "from-a\n", "{}", out.stderr_text());
    c.client
        .upload_to_volume("shared", "/up/put.txt", "through the api")
        .await
        .unwrap();
    let out = sh(&c.client, &a, "cat /data/up/put.txt").await;
    assert_eq!(out.stdout_text(), "through the api");

    // The path calls cross the node link: stat, mkdir, chmod, list, rm.
    let st = c
        .client
        .stat_volume_file("shared", "/in/note")
        .await
        .unwrap();
    assert_eq!(st.size, 7);
    let dir = c
        .client
        .make_volume_dir(
            "shared",
            &MakeVolumeDirRequest {
                path: "/out/deep".into(),
                parents: None,
                uid: Some(0),
                gid: Some(0),
                mode: Some(0o750),
            },
        )
        .await
        .unwrap();
    assert_eq!((dir.mode, dir.uid), (0o750, Some(0)));
    let changed = c
        .client
        .set_volume_file_attrs(
            "shared",
            "/out/deep",
            &VolumeFileAttrs {
                uid: Some(1000),
                gid: None,
                mode: Some(0o700),
            },
        )
        .await
        .unwrap();
    assert_eq!((changed.mode, changed.uid), (0o700, Some(1000)));
    let out = sh(&c.client, &b, "stat -c '%a %u' /mnt/v/out/deep").await;
    assert_eq!(out.stdout_text().trim(), "700 1000");
    let tree = c.client.list_volume_tree("shared", "/", 2).await.unwrap();
    let names: Vec<&str> = tree.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(
        names.contains(&"/out/deep") && names.contains(&"/in/note"),
        "{names:?}"
    );
    c.client.remove_volume_file("shared", "/out").await.unwrap();
    let (gone, _) = code(c.client.stat_volume_file("shared", "/out/deep").await);
    assert_eq!(gone, ErrorCode::FileNotFound);
    let used = c.client.volume("shared").await.unwrap().used_bytes;
    assert!(used.is_some_and(|u| u > 0), "{used:?}");

    // Drained, the volume's node takes no sandbox that mounts it: a create is refused at once,
    // naming the node, and a wake fails, leaving the sandbox suspended; its files are still
    // served, and sandboxes without volumes go elsewhere.
    c.wait_op(c.client.suspend_sandbox(&b).await.unwrap()).await;
    let drained = c.client.drain_node(&home).await.unwrap();
    assert_eq!(drained.state, NodeState::Draining);
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..mounting("shared", "/data")
    };
    let (refused, message) = code(c.client.create_sandbox(&req, None).await);
    assert_eq!(refused, ErrorCode::Unavailable, "{message}");
    assert!(
        message.contains(&home) && message.contains("draining"),
        "{message}"
    );
    let wake = c.client.wake_sandbox(&b).await.unwrap();
    let wake = c
        .client
        .wait_operation(&wake.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(wake.state, OperationState::Failed, "{wake:?}");
    assert_eq!(wake.error.map(|e| e.code), Some(ErrorCode::Unavailable));
    assert_eq!(c.state(&b).await.0, SandboxState::Suspended);
    assert_eq!(
        c.client
            .read_volume_file("shared", "/in/note")
            .await
            .unwrap(),
        b"from-a\n"
    );
    let elsewhere = sandbox(&c.client, "tiny").await;
    assert_eq!(c.node_of(&elsewhere).unwrap(), other);
    c.client.ready_node(&home).await.unwrap();

    // Ready again, the volume's node takes the wake, though spread would pick the other (it
    // has no sandbox left), and the woken sandbox sees the volume again.
    for id in [&plain, &elsewhere] {
        delete(&c.client, id).await;
    }
    c.wait_op(c.client.wake_sandbox(&b).await.unwrap()).await;
    assert_eq!(c.node_of(&b).unwrap(), home);
    let out = sh(&c.client, &b, "cat /mnt/v/in/note").await;
    assert_eq!(out.stdout_text(), "from-a\n", "{}", out.stderr_text());

    // Mounted, the volume cannot go; unmounted, it goes from its node.
    let (in_use, _) = code(c.client.delete_volume("shared").await);
    assert_eq!(in_use, ErrorCode::VolumeInUse);
    for id in [&a, &b] {
        delete(&c.client, id).await;
    }
    c.client.delete_volume("shared").await.unwrap();
    assert_eq!(image_on(&home), 0);
}
