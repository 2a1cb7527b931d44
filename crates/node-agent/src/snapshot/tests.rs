//! Round trips through a local snapshot store (needs root: device nodes, `trusted.*` xattrs,
//! ownership).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use super::*;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[tokio::test]
async fn upper_dir_round_trips_with_whiteouts_opaque_dirs_links_and_owners() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let upper = tmp.path().join("upper");
    std::fs::create_dir_all(upper.join("home/user/sub")).expect("mkdir");
    std::fs::write(upper.join("home/user/a.txt"), b"hello").expect("write");
    std::fs::set_permissions(
        upper.join("home/user/a.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
    std::os::unix::fs::lchown(upper.join("home/user/a.txt"), Some(1000), Some(1001))
        .expect("chown");
    std::os::unix::fs::symlink("a.txt", upper.join("home/user/link")).expect("symlink");
    std::fs::hard_link(upper.join("home/user/a.txt"), upper.join("home/user/hard")).expect("link");
    let big: Vec<u8> = (0..(3 * PART_BYTES + 123))
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(upper.join("home/user/sub/big.bin"), &big).expect("write big");
    // An overlayfs whiteout (deleted lower file) and an opaque directory.
    nix::sys::stat::mknod(
        &upper.join("home/user/deleted"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o000),
        nix::sys::stat::makedev(0, 0),
    )
    .expect("mknod");
    std::fs::create_dir(upper.join("opaque")).expect("mkdir");
    xattr::set(upper.join("opaque"), "trusted.overlay.opaque", b"y").expect("xattr");

    let store = SnapshotStore::local(&tmp.path().join("snapshots")).expect("store");
    let cancel = CancellationToken::new();
    let saved = store.save("sb-test", &upper, &cancel).await.expect("save");
    assert_eq!(saved.file_bytes, 5 + big.len() as u64);
    assert!(store.exists("sb-test").await.expect("exists"));
    assert_eq!(
        store.list().await.expect("list"),
        vec!["sb-test".to_string()]
    );

    let restored = tmp.path().join("restored");
    std::fs::create_dir(&restored).expect("mkdir");
    store
        .restore("sb-test", &restored, &cancel)
        .await
        .expect("restore");

    let a = restored.join("home/user/a.txt");
    assert_eq!(std::fs::read(&a).expect("read"), b"hello");
    let meta = std::fs::metadata(&a).expect("stat");
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o640, 1000, 1001)
    );
    assert_eq!(meta.nlink(), 2, "hard link kept");
    assert_eq!(
        std::fs::read_link(restored.join("home/user/link"))
            .expect("readlink")
            .to_str(),
        Some("a.txt")
    );
    assert_eq!(
        std::fs::read(restored.join("home/user/sub/big.bin")).expect("read big"),
        big
    );
    let wh = std::fs::symlink_metadata(restored.join("home/user/deleted")).expect("whiteout");
    assert!(wh.file_type().is_char_device());
    assert_eq!(wh.rdev(), 0);
    assert_eq!(
        xattr::get(restored.join("opaque"), "trusted.overlay.opaque").expect("get"),
        Some(b"y".to_vec())
    );

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
    let upper = tmp.path().join("upper");
    std::fs::create_dir_all(&upper).expect("mkdir");
    std::fs::write(upper.join("f"), vec![7u8; 2 * PART_BYTES]).expect("write");
    let root = tmp.path().join("snapshots");
    let store = SnapshotStore::local(&root).expect("store");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = store
        .save("sb-x", &upper, &cancel)
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
        .restore("sb-none", tmp.path(), &CancellationToken::new())
        .await
        .expect_err("missing");
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

#[test]
fn unsafe_paths_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    // `append_data` refuses `..`; write the name into the header directly.
    let name = b"../escape";
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_cksum();
    b.append(&h, &b"x"[..]).expect("append");
    let bytes = b.into_inner().expect("tar");
    let err = unpack::unpack(&bytes[..], tmp.path()).expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(!tmp.path().parent().expect("parent").join("escape").exists());
}
