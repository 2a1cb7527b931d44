//! Checkpoint archives end to end on runc: export → import → a sandbox created from the
//! import has the files byte for byte, and exporting the import gives the same artifact bytes;
//! hostile archives (`..`, absolute paths, symlinks and hard links out, writes through a
//! symlink, devices, other runtimes, other formats) are refused with `invalid_argument` and
//! leave nothing behind.

use std::time::Duration;

use cove_api_types::{
    CheckpointArchiveHeader, CreateCheckpointRequest, CreateSandboxRequest, ErrorCode, Operation,
    OperationState,
};
use cove_client::{Client, ClientError};
use cove_e2e::archives::{archive, entries, export, fs_tar};
use cove_e2e::{client, delete, random_bytes, sandbox, server, sh, sha256_hex};

const WAIT: Duration = Duration::from_secs(120);

async fn done(c: &Client, op: &Operation) {
    let op = c
        .wait_operation(&op.id, WAIT)
        .await
        .expect("operation ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

fn api_code(e: &ClientError) -> Option<ErrorCode> {
    e.api_body().map(|b| b.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_round_trip_is_byte_exact_and_hostile_archives_are_refused() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let blob = random_bytes(300_000);
    c.upload(
        &id,
        "/home/user/blob.bin",
        blob.clone(),
        &Default::default(),
    )
    .await
    .expect("upload");
    let o = sh(
        &c,
        &id,
        "mkdir -p /home/user/d && ln -s blob.bin /home/user/link && echo x > /home/user/d/x",
    )
    .await;
    assert_eq!(o.command.exit_code, Some(0), "{}", o.stderr_text());
    let r = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    done(&c, &r.operation).await;

    let exported: Vec<u8> = export(&c, &r.checkpoint.id).await;
    let parts = entries(&exported);
    let names: Vec<_> = parts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["cove-checkpoint.json", "snapshot.json", "artifacts/fs.tar"]
    );
    let header: CheckpointArchiveHeader = serde_json::from_slice(&parts[0].1).expect("header");
    assert_eq!(header.version, 1);
    assert_eq!(header.checkpoint.id, r.checkpoint.id);

    let imported = c
        .import_checkpoint(exported.clone(), Some("imported"))
        .await
        .expect("import");
    assert_ne!(imported.id, r.checkpoint.id);
    assert_eq!(imported.name.as_deref(), Some("imported"));
    let again: Vec<u8> = export(&c, &imported.id).await;
    assert_eq!(entries(&again)[2].1, parts[2].1, "artifact bytes differ");

    let created = c
        .create_sandbox(
            &CreateSandboxRequest {
                checkpoint: Some(imported.id.clone()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect("create from the import");
    done(&c, &created.operation).await;
    let new = created.sandbox.id;
    let got = c
        .read_file(&new, "/home/user/blob.bin")
        .await
        .expect("read");
    assert_eq!(sha256_hex(&got), sha256_hex(&blob));
    let o = sh(&c, &new, "readlink /home/user/link && cat /home/user/d/x").await;
    assert_eq!(o.stdout_text(), "blob.bin\nx\n");

    // Hostile archives.
    let head = &parts[0].1;
    let outside = server().data_dir.join("escaped");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not a tar", b"hello, not a tar at all".repeat(40)),
        ("other runtime", archive(head, "qemu", &parts[2].1)),
        (
            "other format",
            archive(br#"{"format":"x","version":9}"#, "runc", &parts[2].1),
        ),
        (
            "dot-dot",
            archive(
                head,
                "runc",
                &fs_tar(&[("../../../../escaped", tar::EntryType::Regular, "")]),
            ),
        ),
        (
            "absolute",
            archive(
                head,
                "runc",
                &fs_tar(&[("/tmp/escaped", tar::EntryType::Regular, "")]),
            ),
        ),
        (
            "symlink out",
            archive(
                head,
                "runc",
                &fs_tar(&[("a/l", tar::EntryType::Symlink, "../../..")]),
            ),
        ),
        (
            "through a symlink",
            archive(
                head,
                "runc",
                &fs_tar(&[
                    ("l", tar::EntryType::Symlink, "/"),
                    ("l/escaped", tar::EntryType::Regular, ""),
                ]),
            ),
        ),
        (
            "hard link out",
            archive(
                head,
                "runc",
                &fs_tar(&[("h", tar::EntryType::Link, "../../etc/passwd")]),
            ),
        ),
        (
            "block device",
            archive(head, "runc", &fs_tar(&[("sda", tar::EntryType::Block, "")])),
        ),
        (
            "char device",
            archive(head, "runc", &fs_tar(&[("mem", tar::EntryType::Char, "")])),
        ),
    ];
    let before = c
        .list_checkpoints(None)
        .await
        .expect("list")
        .checkpoints
        .len();
    for (what, body) in cases {
        let e = c.import_checkpoint(body, None).await.expect_err(what);
        eprintln!("refused {what}: {:?}", e.api_body().map(|b| &b.message));
        assert_eq!(
            api_code(&e),
            Some(ErrorCode::InvalidArgument),
            "{what}: {e}"
        );
    }
    assert!(!outside.exists());
    assert!(!std::path::Path::new("/tmp/escaped").exists());
    assert_eq!(
        c.list_checkpoints(None)
            .await
            .expect("list")
            .checkpoints
            .len(),
        before,
        "a refused import left a checkpoint"
    );
    let staged = server().data_dir.join("imports");
    let left = std::fs::read_dir(&staged).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "staged imports left behind");
    let ck_dir = server().data_dir.join("snapshots/checkpoints");
    let stored = std::fs::read_dir(&ck_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(stored, 2, "only the two good checkpoints are in the store");

    delete(&c, &new).await;
    delete(&c, &id).await;
}
