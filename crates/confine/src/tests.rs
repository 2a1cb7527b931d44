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

#[test]
fn links_and_streamed_files_replace_planted_entries_and_stay_inside() {
    let lab = lab();
    let tree = Tree::open(&lab.tree).expect("open");
    // A planted link where a file, a symlink and a hard link are placed: replaced, not
    // written through.
    for name in ["etc/file", "etc/sym", "etc/hard"] {
        symlink(&lab.canary_file, lab.tree.join(name)).expect("symlink");
    }
    tree.replace_file_with(Path::new("etc/file"), 0o640, None, &mut |f| {
        std::io::Write::write_all(f, b"streamed")
    })
    .expect("file");
    assert_eq!(
        std::fs::read(lab.tree.join("etc/file")).expect("read"),
        b"streamed"
    );
    assert_eq!(
        std::fs::symlink_metadata(lab.tree.join("etc/file"))
            .expect("stat")
            .mode()
            & 0o7777,
        0o640
    );
    tree.replace_symlink(Path::new("etc/sym"), Path::new("/etc/shadow"), None)
        .expect("symlink");
    assert_eq!(
        tree.read_link(Path::new("etc/sym")).expect("readlink"),
        Path::new("/etc/shadow")
    );
    assert!(tree.read_link(Path::new("etc/file")).is_err(), "no symlink");
    tree.replace_hard_link(Path::new("etc/file"), Path::new("etc/hard"))
        .expect("hard link");
    let (a, b) = (
        std::fs::metadata(lab.tree.join("etc/file")).expect("stat"),
        std::fs::metadata(lab.tree.join("etc/hard")).expect("stat"),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    // A hard link to a planted link links the link, never its host target.
    symlink(&lab.canary_file, lab.tree.join("etc/planted")).expect("symlink");
    tree.replace_hard_link(Path::new("etc/planted"), Path::new("etc/hard2"))
        .expect("hard link");
    assert!(std::fs::symlink_metadata(lab.tree.join("etc/hard2"))
        .expect("stat")
        .file_type()
        .is_symlink());
    // Targets that leave the tree or go through a link are refused.
    symlink(&lab.canary_dir, lab.tree.join("out")).expect("symlink");
    assert!(tree
        .replace_hard_link(Path::new("../host/secret"), Path::new("etc/x"))
        .is_err());
    assert!(matches!(
        tree.replace_hard_link(Path::new("out/f"), Path::new("etc/x")),
        Err(Error::Link { .. })
    ));
    assert!(matches!(
        tree.replace_symlink(Path::new("out/s"), Path::new("x"), None),
        Err(Error::Link { .. })
    ));
    lab.assert_canaries_intact();
}

#[test]
fn open_dir_in_root_follows_links_as_the_sandbox_would_and_never_leaves() {
    let lab = lab();
    std::fs::create_dir_all(lab.tree.join("usr/bin")).expect("mkdir");
    symlink("usr/bin", lab.tree.join("bin")).expect("symlink");
    symlink("/etc", lab.tree.join("abs")).expect("symlink");
    symlink("../../../../..", lab.tree.join("up")).expect("symlink");
    symlink(&lab.canary_dir, lab.tree.join("host")).expect("symlink");
    let tree = Tree::open(&lab.tree).expect("open");
    tree.open_dir_in_root(Path::new("bin"))
        .expect("bin")
        .replace_file(Path::new("tool"), b"t", 0o755, None)
        .expect("write");
    assert!(lab.tree.join("usr/bin/tool").exists());
    tree.open_dir_in_root(Path::new("abs"))
        .expect("abs")
        .replace_file(Path::new("a"), b"a", 0o644, None)
        .expect("write");
    assert!(lab.tree.join("etc/a").exists());
    tree.open_dir_in_root(Path::new("up/etc"))
        .expect("up")
        .replace_file(Path::new("b"), b"b", 0o644, None)
        .expect("write");
    assert!(lab.tree.join("etc/b").exists());
    // An absolute link to the host's canary dir names `<tree>/<that path>`, missing here.
    assert!(tree.open_dir_in_root(Path::new("host")).is_err());
    assert!(matches!(
        tree.open_dir_in_root(Path::new("../host")),
        Err(Error::BadPath { .. })
    ));
    lab.assert_canaries_intact();
}

#[test]
fn a_wide_tree_is_walked_with_few_descriptors_open() {
    let lab = lab();
    for i in 0..2000 {
        std::fs::create_dir(lab.tree.join(format!("d{i}"))).expect("mkdir");
    }
    let tree = Tree::open(&lab.tree).expect("open");
    let mut most = 0;
    tree.walk(10_000, &mut |_, _, _| {
        let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
        most = most.max(open);
        Ok(())
    })
    .expect("walk");
    assert!(most < 500, "{most} descriptors open at once");
}
