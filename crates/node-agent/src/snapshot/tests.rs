//! Round trips of artifact bytes through a local snapshot store, manifests, cancellation and
//! staging sweeps. (The runtime's artifact formats are tested with the runtime.)

use super::*;

/// Writes `data` as the whole artifact (what a runtime's blocking save does).
async fn write_all(mut out: ChannelWriter, data: Vec<u8>) -> std::io::Result<u64> {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        out.write_all(&data)?;
        out.flush()?;
        Ok(data.len() as u64)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Reads the whole artifact (what a runtime's blocking load does).
async fn read_all(mut input: ChannelReader) -> std::io::Result<(u64, Vec<u8>)> {
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut buf = Vec::new();
        input.read_to_end(&mut buf)?;
        Ok((buf.len() as u64, buf))
    })
    .await
    .map_err(std::io::Error::other)?
}

fn manifest(names: &[&str]) -> Manifest {
    Manifest {
        version: MANIFEST_VERSION,
        runtime: "runc".into(),
        memory: false,
        artifacts: names
            .iter()
            .map(|n| ManifestArtifact {
                name: n.to_string(),
                content_bytes: 0,
            })
            .collect(),
        network_counters: None,
    }
}

#[tokio::test]
async fn artifacts_round_trip_in_parts_and_the_manifest_completes_a_snapshot() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = SnapshotStore::local(&tmp.path().join("snapshots")).expect("store");
    let cancel = CancellationToken::new();
    let big: Vec<u8> = (0..(3 * PART_BYTES + 123))
        .map(|i| (i % 251) as u8)
        .collect();
    let saved = store
        .save_artifact("sb-test", "fs.tar", &cancel, |w| write_all(w, big.clone()))
        .await
        .expect("save");
    assert_eq!(saved, big.len() as u64);
    assert!(
        !store.exists("sb-test").await.expect("exists"),
        "no manifest yet: not a snapshot"
    );
    store
        .commit("sb-test", &manifest(&["fs.tar"]))
        .await
        .expect("commit");
    assert!(store.exists("sb-test").await.expect("exists"));
    assert_eq!(
        store.list().await.expect("list"),
        vec!["sb-test".to_string()]
    );
    assert_eq!(
        store.manifest("sb-test").await.expect("manifest"),
        manifest(&["fs.tar"])
    );

    let mut got = Vec::new();
    let restored = store
        .restore_artifact("sb-test", "fs.tar", &cancel, |r| async {
            let (n, bytes) = read_all(r).await?;
            got = bytes;
            Ok(n)
        })
        .await
        .expect("restore");
    assert_eq!(restored, big.len() as u64);
    assert_eq!(got, big);

    store.delete("sb-test").await.expect("delete");
    assert!(!store.exists("sb-test").await.expect("exists"));
    assert!(
        !tmp.path().join("snapshots/sandboxes/sb-test").exists(),
        "empty dir removed"
    );
    store
        .delete("sb-test")
        .await
        .expect("second delete is fine");
}

#[tokio::test]
async fn a_cancelled_save_leaves_no_snapshot_and_staging_is_swept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("snapshots");
    let store = SnapshotStore::local(&root).expect("store");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = store
        .save_artifact("sb-x", "fs.tar", &cancel, |w| {
            write_all(w, vec![7u8; 2 * PART_BYTES])
        })
        .await
        .expect_err("cancelled");
    assert!(matches!(err, SnapshotError::Cancelled), "{err}");
    assert!(!store.exists("sb-x").await.expect("exists"));

    // What a crash mid-upload leaves behind in a local store.
    let dir = root.join("sandboxes/sb-y");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("fs.tar#1"), b"partial").expect("write");
    assert_eq!(store.sweep_staging().await.expect("sweep"), 1);
    assert!(!dir.exists());
    assert!(store.list().await.expect("list").is_empty());
}

#[tokio::test]
async fn restoring_a_missing_snapshot_is_missing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = SnapshotStore::local(&tmp.path().join("s")).expect("store");
    let err = store
        .restore_artifact("sb-none", "fs.tar", &CancellationToken::new(), |r| async {
            read_all(r).await.map(|(n, _)| n)
        })
        .await
        .expect_err("missing");
    assert!(matches!(err, SnapshotError::Missing(_)));
    let err = store.manifest("sb-none").await.expect_err("missing");
    assert!(matches!(err, SnapshotError::Missing(_)));
}

#[test]
fn urls_are_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", tmp.path().join("s").display());
    assert_eq!(
        SnapshotStore::from_url(&url, []).expect("file url").kind(),
        "file"
    );
    assert!(SnapshotStore::from_url("ftp://x/y", []).is_err());
    assert!(SnapshotStore::from_url("not a url", []).is_err());
    let s3 = SnapshotStore::from_url(
        "s3://bucket/prefix",
        [("aws_region".to_string(), "us-east-1".to_string())],
    )
    .expect("s3 url");
    assert_eq!(s3.kind(), "s3");
}

#[test]
fn staging_names_are_recognised() {
    assert!(is_staging_name("fs.tar#1"));
    assert!(is_staging_name("fs.tar#123"));
    assert!(!is_staging_name("fs.tar"));
    assert!(!is_staging_name("fs.tar#"));
    assert!(!is_staging_name("a#b"));
}
