//! Watch translation against a real inotify instance on a temporary directory.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cove_guest_protocol::{FileEvent, FileEventKind, FileType};
use nix::errno::Errno;

use super::events::{translate, Flow};
use super::tree::Tree;

/// Everything queued so far, translated.
fn drain(tree: &mut Tree) -> (Vec<FileEvent>, Flow) {
    let mut raw = Vec::new();
    loop {
        match tree.read() {
            Ok(evs) => raw.extend(evs),
            Err(Errno::EAGAIN) => break,
            Err(e) => panic!("read: {e}"),
        }
    }
    let mut out = Vec::new();
    let flow = translate(tree, raw, &mut out);
    (out, flow)
}

fn has(events: &[FileEvent], kind: FileEventKind, path: &Path) -> bool {
    events
        .iter()
        .any(|e| e.kind == kind && e.path.0 == path.as_os_str().as_bytes())
}

#[test]
fn new_subdirectories_are_watched_and_their_contents_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let mut tree = Tree::new(root.clone(), true, Vec::new()).expect("watch");
    fs::create_dir_all(root.join("a/b/c")).expect("mkdir -p");
    fs::write(root.join("a/b/c/f"), b"x").expect("write");
    let (events, flow) = drain(&mut tree);
    assert_eq!(flow, Flow::Continue);
    for p in ["a", "a/b", "a/b/c", "a/b/c/f"] {
        assert!(
            has(&events, FileEventKind::Create, &root.join(p)),
            "{p}: {events:?}"
        );
    }
    let c = events
        .iter()
        .find(|e| e.path.0 == root.join("a/b/c").as_os_str().as_bytes())
        .expect("c");
    assert_eq!(c.file_type, FileType::Dir);
    assert_eq!(tree.len(), 4);
    // Now every level is watched: a later file is a plain create + write.
    fs::write(root.join("a/b/c/g"), b"y").expect("write");
    let (events, _) = drain(&mut tree);
    assert!(has(&events, FileEventKind::Create, &root.join("a/b/c/g")));
    assert!(has(&events, FileEventKind::Write, &root.join("a/b/c/g")));
}

#[test]
fn renames_removes_and_chmods() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    fs::create_dir(root.join("d")).expect("mkdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let mut tree = Tree::new(root.clone(), true, Vec::new()).expect("watch");
    fs::write(root.join("f"), b"1").expect("write");
    fs::rename(root.join("f"), root.join("g")).expect("rename");
    fs::set_permissions(root.join("g"), fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::rename(root.join("d"), root.join("e")).expect("rename dir");
    fs::write(root.join("e/inner"), b"2").expect("write inner");
    fs::rename(root.join("g"), outside.path().join("g")).expect("move out");
    let (events, _) = drain(&mut tree);
    let rename = events
        .iter()
        .find(|e| {
            e.kind == FileEventKind::Rename && e.path.0 == root.join("g").as_os_str().as_bytes()
        })
        .expect("rename event");
    assert_eq!(
        rename.from.as_ref().map(|f| f.0.clone()),
        Some(root.join("f").as_os_str().as_bytes().to_vec())
    );
    assert!(has(&events, FileEventKind::Chmod, &root.join("g")));
    assert!(has(&events, FileEventKind::Rename, &root.join("e")));
    // The renamed directory's watch reports under its new name.
    assert!(
        has(&events, FileEventKind::Create, &root.join("e/inner")),
        "{events:?}"
    );
    assert!(has(&events, FileEventKind::Remove, &root.join("g")));
}

#[test]
fn removing_the_root_ends_the_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("w");
    fs::create_dir(&root).expect("mkdir");
    let mut tree = Tree::new(root.clone(), false, Vec::new()).expect("watch");
    fs::write(root.join("x"), b"").expect("write");
    fs::remove_file(root.join("x")).expect("rm");
    fs::remove_dir(&root).expect("rmdir");
    let (events, flow) = drain(&mut tree);
    assert!(has(&events, FileEventKind::Remove, &root.join("x")));
    assert_eq!(flow, Flow::RootGone);
    assert_eq!(events.last().map(|e| e.kind), Some(FileEventKind::Remove));
}

#[test]
fn a_file_is_not_a_watchable_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("f"), b"").expect("write");
    let err = Tree::new(dir.path().join("f"), true, Vec::new())
        .err()
        .expect("refused");
    assert_eq!(err.code, cove_guest_protocol::ErrorCode::WrongType);
    let err = Tree::new(dir.path().join("missing"), true, Vec::new())
        .err()
        .expect("refused");
    assert_eq!(err.code, cove_guest_protocol::ErrorCode::NotFound);
}
