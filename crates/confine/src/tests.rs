//! Each test plants what a hostile tenant would (links to a host canary, FIFOs, `..`) and
//! checks that the canary is untouched and nothing blocks.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use super::*;

struct Lab {
    _tmp: tempfile::TempDir,
    tree: std::path::PathBuf,
    canary_file: std::path::PathBuf,
    canary_dir: std::path::PathBuf,
}

fn lab() -> Lab {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tree = tmp.path().join("tree");
    let host = tmp.path().join("host");
    std::fs::create_dir_all(tree.join("etc")).expect("mkdir");
    std::fs::create_dir_all(&host).expect("mkdir");
    let canary_file = host.join("secret");
    std::fs::write(&canary_file, b"host secret").expect("write");
    let canary_dir = host.join("dir");
    std::fs::create_dir(&canary_dir).expect("mkdir");
    Lab {
        _tmp: tmp,
        tree,
        canary_file,
        canary_dir,
    }
}

impl Lab {
    fn assert_canaries_intact(&self) {
        assert_eq!(
            std::fs::read(&self.canary_file).expect("read"),
            b"host secret"
        );
        assert_eq!(
            std::fs::read_dir(&self.canary_dir).expect("ls").count(),
            0,
            "nothing new in the canary directory"
        );
        assert_eq!(
            std::fs::read_dir(self.canary_dir.parent().expect("parent"))
                .expect("ls")
                .count(),
            2
        );
    }
}

#[test]
fn replace_file_replaces_a_planted_link_instead_of_writing_through_it() {
    let lab = lab();
    symlink(&lab.canary_file, lab.tree.join("etc/hostname")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    tree.replace_file(Path::new("etc/hostname"), b"sbx\n", 0o644, None)
        .expect("replace");
    let meta = std::fs::symlink_metadata(lab.tree.join("etc/hostname")).expect("stat");
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o777, 0o644);
    assert_eq!(
        std::fs::read(lab.tree.join("etc/hostname")).expect("read"),
        b"sbx\n"
    );
    lab.assert_canaries_intact();
}

#[test]
fn a_planted_fifo_or_directory_is_replaced_without_blocking() {
    let lab = lab();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        lab.tree.join("etc/hosts"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    std::fs::create_dir_all(lab.tree.join("etc/hostname/deep")).expect("mkdir");
    let tree = Tree::open(&lab.tree).expect("open");
    tree.write_if_changed(Path::new("etc/hosts"), b"127.0.0.1 x\n", 0o644)
        .expect("hosts");
    tree.write_if_changed(Path::new("etc/hostname"), b"x\n", 0o644)
        .expect("hostname");
    assert_eq!(
        std::fs::read(lab.tree.join("etc/hosts")).expect("read"),
        b"127.0.0.1 x\n"
    );
    assert_eq!(
        std::fs::read(lab.tree.join("etc/hostname")).expect("read"),
        b"x\n"
    );
}

#[test]
fn reads_refuse_links_fifos_and_escapes() {
    let lab = lab();
    symlink(&lab.canary_file, lab.tree.join("link")).expect("symlink");
    symlink("/", lab.tree.join("up")).expect("symlink");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        lab.tree.join("fifo"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let tree = Tree::open(&lab.tree).expect("open");
    assert!(matches!(
        tree.read_file(Path::new("link"), 100),
        Err(Error::Link { .. })
    ));
    assert!(matches!(
        tree.read_file(Path::new("up/etc/passwd"), 100),
        Err(Error::Link { .. })
    ));
    assert!(matches!(
        tree.read_file(Path::new("fifo"), 100),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        tree.read_file(Path::new("../host/secret"), 100),
        Err(Error::BadPath { .. })
    ));
    assert!(matches!(
        tree.open_dir(Path::new("up")),
        Err(Error::Link { .. })
    ));
    // A link is seen as a link.
    assert!(tree
        .stat(Path::new("link"))
        .expect("stat")
        .expect("some")
        .is_symlink());
    assert!(matches!(
        tree.stat(Path::new("up/etc")),
        Err(Error::Link { .. })
    ));
}

#[test]
fn ensure_dir_replaces_a_planted_link_and_create_dir_all_refuses_it() {
    let lab = lab();
    symlink(&lab.canary_dir, lab.tree.join(".cove")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    assert!(matches!(
        tree.create_dir_all(Path::new(".cove/run"), 0o755),
        Err(Error::Link { .. })
    ));
    let run = tree
        .ensure_dir(Path::new(".cove/run"), 0o755)
        .expect("ensure");
    assert!(run.meta().expect("meta").is_dir());
    assert!(std::fs::symlink_metadata(lab.tree.join(".cove"))
        .expect("stat")
        .is_dir());
    tree.chown(Path::new(".cove/run"), Some(12345), Some(12345))
        .ok();
    lab.assert_canaries_intact();
}

#[test]
fn remove_deletes_links_not_their_targets() {
    let lab = lab();
    std::fs::create_dir_all(lab.tree.join("d/e")).expect("mkdir");
    symlink(&lab.canary_dir, lab.tree.join("d/e/to-dir")).expect("symlink");
    symlink(&lab.canary_file, lab.tree.join("d/to-file")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    tree.remove(Path::new("d")).expect("remove");
    assert!(!lab.tree.join("d").exists());
    tree.remove(Path::new("missing/x"))
        .expect("missing is fine");
    lab.assert_canaries_intact();
}

#[test]
fn walk_visits_without_following_and_is_bounded() {
    let lab = lab();
    std::fs::create_dir_all(lab.tree.join("a/b")).expect("mkdir");
    std::fs::write(lab.tree.join("a/b/f"), b"x").expect("write");
    symlink(&lab.canary_dir, lab.tree.join("a/l")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    let mut names = Vec::new();
    let n = tree
        .walk(100, &mut |_, name, _| {
            names.push(name.to_string_lossy().into_owned());
            Ok(())
        })
        .expect("walk");
    names.sort();
    assert_eq!(names, ["a", "b", "etc", "f", "l"]);
    assert_eq!(n, 5);
    assert!(matches!(
        tree.walk(2, &mut |_, _, _| Ok(())),
        Err(Error::TooMany { max: 2 })
    ));
}

#[test]
fn chmod_leaves_links_alone() {
    let lab = lab();
    std::fs::set_permissions(&lab.canary_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    symlink(&lab.canary_file, lab.tree.join("l")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    assert!(!tree.chmod(Path::new("l"), 0o777).expect("chmod"));
    assert_eq!(
        std::fs::metadata(&lab.canary_file).expect("stat").mode() & 0o777,
        0o600
    );
}
