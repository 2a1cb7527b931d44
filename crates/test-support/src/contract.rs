//! The node-contract suite: cases any node (the fake, the real node agent, either behind the
//! gRPC pair) must pass the same way. Each case takes the node under test and a launch of a
//! sandbox it can start; the caller scripts what the fake needs ([`prepare`]).

use bytes::Bytes;
use cove_node_api::{
    AttachEvent, FileType, NodeApi, NodeError, NodeSandboxState, Program, SandboxLaunch,
    SandboxPath, SpawnRequest, WriteFileRequest,
};
use futures::StreamExt;

use crate::{FakeNode, Script};

/// The command the suite runs and the output it expects of it.
pub const ECHO: &[&str] = &["echo", "contract"];

/// Makes `fake` ready for the suite: release 1 of `base` and the suite's command.
pub fn prepare(fake: &FakeNode) {
    fake.add_release("base", 1);
    fake.script(&ECHO.join(" "), Script::exit(0).stdout("contract\n"));
}

/// A launch of sandbox `id` from release 1 of `base`: 1 vCPU, 256 MiB, no network or volumes.
pub fn launch(id: &str) -> SandboxLaunch {
    SandboxLaunch {
        id: id.into(),
        template: "base".into(),
        release: 1,
        release_digest: None,
        resources: cove_domain::Resources {
            vcpus: 1,
            memory_mib: 256,
            pids_max: 256,
            disk_mib: None,
        },
        network: Default::default(),
        secrets: Default::default(),
        arm_secrets: false,
        volumes: Vec::new(),
    }
}

/// Every case in order on one sandbox started from `launch`, which is destroyed at the end.
///
/// # Panics
/// When `node` breaks the contract (the message names the case).
pub async fn run(node: &dyn NodeApi, launch: SandboxLaunch) {
    let id = launch.id.clone();
    lifecycle(node, launch).await;
    commands(node, &id).await;
    files(node, &id).await;
    node.destroy_sandbox(&id).await.expect("destroy");
    let listed = node.list_sandboxes().await.expect("list after destroy");
    assert!(!listed.contains(&id), "a destroyed sandbox is not listed");
    assert_eq!(
        node.inspect_sandbox(&id)
            .await
            .expect("inspect after destroy"),
        None,
        "a destroyed sandbox is gone"
    );
}

/// Start, list, inspect, and a typed error for an unknown sandbox.
async fn lifecycle(node: &dyn NodeApi, launch: SandboxLaunch) {
    let id = launch.id.clone();
    node.start_sandbox(launch).await.expect("start");
    let listed = node.list_sandboxes().await.expect("list");
    assert!(
        listed.contains(&id),
        "a started sandbox is listed: {listed:?}"
    );
    assert_eq!(
        node.inspect_sandbox(&id).await.expect("inspect"),
        Some(NodeSandboxState::Running)
    );
    assert!(
        matches!(
            node.pause_sandbox("sbx-contract-nope").await,
            Err(NodeError::SandboxNotFound(_))
        ),
        "an unknown sandbox is SandboxNotFound"
    );
}

/// A command's output, attached with follow, ends with its exit.
async fn commands(node: &dyn NodeApi, id: &str) {
    let spawn = SpawnRequest {
        command_id: "cmd-contract".into(),
        program: Program::Argv(ECHO.iter().map(|s| s.to_string()).collect()),
        env: Default::default(),
        cwd: None,
        user: None,
        stdin: false,
        timeout_ms: Some(30_000),
        pty: None,
    };
    node.spawn(id, spawn).await.expect("spawn");
    let events: Vec<_> = node
        .attach(id, "cmd-contract", 0, true)
        .await
        .expect("attach")
        .collect()
        .await;
    let mut out = Vec::new();
    for ev in &events {
        if let Ok(AttachEvent::Output { data, .. }) = ev {
            out.extend_from_slice(data);
        }
    }
    assert_eq!(out, b"contract\n", "the command's output");
    assert!(
        matches!(events.last(), Some(Ok(AttachEvent::Exited(_)))),
        "the stream ends with the exit: {events:?}"
    );
    assert!(
        matches!(
            node.attach(id, "cmd-contract-nope", 0, true).await,
            Err(NodeError::CommandNotFound(_))
        ),
        "an unknown command is CommandNotFound"
    );
}

/// A directory, a file written in chunks and read back, a listing, a typed missing file.
async fn files(node: &dyn NodeApi, id: &str) {
    let dir = node
        .make_dir(id, SandboxPath::from("/tmp/contract"), None)
        .await
        .expect("make_dir");
    assert_eq!(dir.file_type, FileType::Dir);
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let write = WriteFileRequest {
        path: SandboxPath::from("/tmp/contract/data"),
        user: None,
        mode: None,
        max_bytes: None,
    };
    let written = node
        .write_file(id, write, Box::pin(futures::stream::iter(chunks)))
        .await
        .expect("write_file");
    assert_eq!(written.size, body.len() as u64);
    let stat = node
        .stat(id, SandboxPath::from("/tmp/contract/data"), None)
        .await
        .expect("stat");
    assert_eq!(stat.size, body.len() as u64);
    let (_, bytes) = node
        .read_file(id, SandboxPath::from("/tmp/contract/data"), None, 0, None)
        .await
        .expect("read_file");
    let read: Vec<u8> = bytes
        .map(|b| b.expect("read chunk").to_vec())
        .concat()
        .await;
    assert!(read == body, "the file reads back as written");
    let listed = node
        .list_dir(id, SandboxPath::from("/tmp/contract"), None, 1)
        .await
        .expect("list_dir");
    assert!(
        listed
            .iter()
            .any(|f| f.name == SandboxPath::from("data") && f.file_type == FileType::File),
        "the listing has the file"
    );
    assert!(
        matches!(
            node.read_file(id, SandboxPath::from("/tmp/contract/nope"), None, 0, None)
                .await,
            Err(NodeError::FileNotFound(_))
        ),
        "a missing file is FileNotFound"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fake_node_keeps_the_contract() {
        let fake = FakeNode::new();
        prepare(&fake);
        run(&fake, launch("sbx-contract")).await;
    }
}
