//! Fidelity of the files artifact: pack → unpack round trips (needs root: device nodes,
//! `trusted.*` xattrs, ownership), and hostile archives are refused.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use super::*;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn upper_dir_round_trips_with_whiteouts_opaque_dirs_links_and_owners() {
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
    let big: Vec<u8> = (0..(3 * (8 << 20) + 123))
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
    // A binary value with newlines (as overlayfs's file handles have, at random).
    let handle = b"\x00\xfb\n\x01\n\n\x7f=x y\n";
    xattr::set(upper.join("opaque"), "trusted.overlay.origin", handle).expect("xattr");

    let mut archive = Vec::new();
    let saved = pack(&upper, &mut archive).expect("pack");
    assert_eq!(saved, 5 + big.len() as u64);

    let restored = tmp.path().join("restored");
    std::fs::create_dir(&restored).expect("mkdir");
    assert_eq!(unpack(&archive[..], &restored).expect("unpack"), saved);

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
    assert_eq!(
        xattr::get(restored.join("opaque"), "trusted.overlay.origin").expect("get"),
        Some(handle.to_vec()),
        "a value with newlines survives"
    );
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
    let err = unpack(&bytes[..], tmp.path()).expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(!tmp.path().parent().expect("parent").join("escape").exists());
}
