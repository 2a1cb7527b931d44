//! File calls through the services, and node errors mapped to API codes.

use bytes::Bytes;
use cove_api_types::{ErrorCode, FileType, MakeDirRequest, MoveRequest};
use cove_control_plane::{ListOptions, ReadOptions, SandboxPath, ServiceError, WriteOptions};
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault};
use futures::StreamExt;

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn at(path: &str) -> SandboxPath {
    SandboxPath(path.as_bytes().to_vec())
}

async fn put(h: &Harness, id: &str, path: &str, data: &'static [u8]) -> Result<(), ServiceError> {
    let options = WriteOptions {
        mode: Some("0600".into()),
    };
    let body = futures::stream::iter([Ok(Bytes::from_static(data))]).boxed();
    h.cp.write_file(id, at(path), None, options, None, body)
        .await
        .map(|_| ())
}

async fn get(h: &Harness, id: &str, path: &str) -> Result<Vec<u8>, ServiceError> {
    let (_, mut body) =
        h.cp.read_file(id, at(path), None, ReadOptions::default())
            .await?;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.expect("chunk"));
    }
    Ok(out)
}

#[tokio::test]
async fn files_are_written_read_listed_moved_and_removed() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        put(&h, &id, "project/src/main.rs", b"fn main() {}")
            .await
            .expect("put");
        assert_eq!(
            get(&h, &id, "/home/user/project/src/main.rs")
                .await
                .expect("get"),
            b"fn main() {}"
        );
        let info =
            h.cp.stat_file(&id, at("project/src/main.rs"), None)
                .await
                .expect("stat");
        assert_eq!(
            (info.file_type, info.size, info.mode),
            (FileType::File, 12, 0o600)
        );
        assert_eq!(info.owner, "user");

        let q = ListOptions { depth: Some(3) };
        let names: Vec<String> =
            h.cp.list_files(&id, at("/home/user"), None, q)
                .await
                .expect("list")
                .entries
                .into_iter()
                .map(|e| e.path)
                .collect();
        assert_eq!(
            names,
            [
                "/home/user/project",
                "/home/user/project/src",
                "/home/user/project/src/main.rs"
            ]
        );

        let mk = MakeDirRequest {
            path: Some("/tmp/a/b".into()),
            ..Default::default()
        };
        assert_eq!(
            h.cp.make_dir(&id, mk).await.expect("mkdir").file_type,
            FileType::Dir
        );
        let mv = MoveRequest {
            from: Some("project".into()),
            to: Some("/tmp/a/b/project".into()),
            ..Default::default()
        };
        h.cp.move_file(&id, mv).await.expect("move");
        assert_eq!(
            get(&h, &id, "/tmp/a/b/project/src/main.rs")
                .await
                .expect("moved"),
            b"fn main() {}"
        );
        assert!(
            !h.cp
                .file_exists(&id, at("project"), None)
                .await
                .expect("exists")
                .exists
        );
        h.cp.remove_file(&id, at("/tmp/a"), None)
            .await
            .expect("remove");
        assert!(
            !h.cp
                .file_exists(&id, at("/tmp/a/b"), None)
                .await
                .expect("exists")
                .exists
        );
    })
    .await;
}

#[tokio::test]
async fn node_file_errors_map_to_their_api_codes() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        assert_eq!(code(get(&h, &id, "/nope").await), ErrorCode::FileNotFound);
        assert_eq!(
            code(h.cp.stat_file(&id, at("/nope"), None).await),
            ErrorCode::FileNotFound
        );
        assert_eq!(
            code(h.cp.remove_file(&id, at("/nope"), None).await),
            ErrorCode::FileNotFound
        );
        // A directory where a file is needed names the field.
        match get(&h, &id, "/tmp").await {
            Err(ServiceError::Invalid(i)) => assert_eq!(i.field, "path"),
            other => panic!("{other:?}"),
        }
        put(&h, &id, "/tmp/f", b"x").await.expect("put");
        let mk = MakeDirRequest {
            path: Some("/tmp/f".into()),
            ..Default::default()
        };
        assert_eq!(code(h.cp.make_dir(&id, mk).await), ErrorCode::AlreadyExists);

        let injected = [
            (
                Call::WriteFile,
                NodeError::NoSpace("disk full".into()),
                ErrorCode::NoSpace,
            ),
            (
                Call::WriteFile,
                NodeError::TooLarge("big".into()),
                ErrorCode::PayloadTooLarge,
            ),
            (
                Call::WriteFile,
                NodeError::PermissionDenied("/etc".into()),
                ErrorCode::PermissionDenied,
            ),
            (
                Call::WriteFile,
                NodeError::AgentUnavailable("gone".into()),
                ErrorCode::Unavailable,
            ),
        ];
        for (call, err, want) in injected {
            h.node.inject(call, Fault::fail(err.clone()));
            assert_eq!(code(put(&h, &id, "/tmp/g", b"y").await), want, "{err:?}");
        }
        // Paths are checked before the node.
        let writes = h.node.count(Call::WriteFile);
        assert_eq!(
            code(put(&h, &id, "/tmp/\0", b"y").await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(h.node.count(Call::WriteFile), writes);
    })
    .await;
}

#[tokio::test]
async fn file_calls_need_a_running_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, cove_control_plane::LifecycleVerb::Pause).await;
        assert_eq!(
            code(h.cp.stat_file(&id, at("/tmp"), None).await),
            ErrorCode::SandboxNotRunning
        );
        assert_eq!(h.node.count(Call::Stat), 0);
    })
    .await;
}
