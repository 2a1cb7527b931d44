//! Object volumes (`storage: "object"`) on one server with its snapshot store: a file written
//! in a sandbox outlives it (the delete uploads the volume; the next sandbox's node fetches
//! it), and a suspend and wake keeps it (the suspend uploads, the wake fetches); the volume
//! reads as detached (no node, no known use) while no sandbox holds it.

use std::time::Duration;

use cove_api_types::{
    CreateSandboxRequest, CreateVolumeRequest, OperationState, VolumeMount, VolumeStorage,
};
use cove_client::Client;
use cove_e2e::{client, delete, sandbox_with, sh};

fn mount(name: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: name.into(),
            path: "/data".into(),
            read_only: false,
        }],
        ..Default::default()
    }
}

async fn wait_ok(c: &Client, op: &str) {
    let op = c
        .wait_operation(op, Duration::from_secs(120))
        .await
        .expect("operation finishes");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_volume_outlives_its_sandboxes_and_a_suspend() {
    let c = client();
    let name = format!("objvol-{}", std::process::id());
    let made = c
        .create_volume_with(&CreateVolumeRequest {
            name: name.clone(),
            size_mib: 64,
            storage: VolumeStorage::Object,
        })
        .await
        .expect("create");
    assert_eq!(made.storage, VolumeStorage::Object);

    let a = sandbox_with(&c, "tiny", mount(&name)).await;
    let out = sh(&c, &a, "echo kept > /data/note && sync").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    delete(&c, &a).await;
    // No sandbox holds it: uploaded, on no node.
    let v = c.volume(&name).await.expect("get");
    assert_eq!((v.used_bytes, v.mounted_by.len()), (None, 0), "{v:?}");

    let b = sandbox_with(&c, "tiny", mount(&name)).await;
    let out = sh(&c, &b, "cat /data/note && echo more >> /data/note").await;
    assert_eq!(out.stdout_text(), "kept\n", "{}", out.stderr_text());
    assert!(c.volume(&name).await.expect("get").used_bytes.is_some());

    let op = c.suspend_sandbox(&b).await.expect("suspend");
    wait_ok(&c, &op.id).await;
    assert_eq!(c.volume(&name).await.expect("get").used_bytes, None);
    let op = c.wake_sandbox(&b).await.expect("wake");
    wait_ok(&c, &op.id).await;
    let out = sh(&c, &b, "cat /data/note").await;
    assert_eq!(out.stdout_text(), "kept\nmore\n", "{}", out.stderr_text());

    delete(&c, &b).await;
    // Its files API fetches it again without a sandbox.
    let body = c.read_volume_file(&name, "/note").await.expect("read");
    assert_eq!(&body[..], b"kept\nmore\n");
    c.delete_volume(&name).await.expect("delete");
}
