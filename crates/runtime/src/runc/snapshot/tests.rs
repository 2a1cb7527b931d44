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

/// A tar with one entry whose name is written raw into the header (the builder refuses unsafe
/// names), of type `kind`, with `link` as its link target and `data` as its content.
fn raw_entry(
    b: &mut tar::Builder<Vec<u8>>,
    name: &[u8],
    kind: tar::EntryType,
    link: &[u8],
    data: &[u8],
) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
    h.set_cksum();
    b.append(&h, data).expect("append");
}

/// Issue 12, hostile archives: absolute paths, symlinks out and writes through them, hard
/// links out, device nodes, and a huge long-name header are refused or contained; nothing is
/// ever written outside the target.
#[test]
fn hostile_snapshots_are_refused_or_contained() {
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "untouched").expect("victim");
    let victim_bytes = victim.to_string_lossy().into_owned().into_bytes();
    let fresh = || tempfile::tempdir().expect("tempdir");
    let refused = |bytes: Vec<u8>, what: &str| {
        let root = fresh();
        let err = unpack(&bytes[..], root.path()).expect_err(what);
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{what}: {err}");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "untouched",
            "{what}"
        );
    };

    // An absolute path.
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(
        &mut b,
        &victim_bytes,
        tar::EntryType::Regular,
        b"",
        b"owned",
    );
    refused(b.into_inner().expect("tar"), "absolute path");

    // A symlink out, then a file written through it.
    let mut b = tar::Builder::new(Vec::new());
    let dir = outside.path().to_string_lossy().into_owned();
    raw_entry(&mut b, b"out", tar::EntryType::Symlink, dir.as_bytes(), b"");
    raw_entry(
        &mut b,
        b"out/victim",
        tar::EntryType::Regular,
        b"",
        b"owned",
    );
    refused(b.into_inner().expect("tar"), "write through a symlink");

    // Hard links out: absolute, `..`, and through a symlink.
    for target in [
        victim_bytes.clone(),
        b"../victim".to_vec(),
        b"out/victim".to_vec(),
    ] {
        let mut b = tar::Builder::new(Vec::new());
        raw_entry(&mut b, b"out", tar::EntryType::Symlink, dir.as_bytes(), b"");
        raw_entry(&mut b, b"link", tar::EntryType::Link, &target, b"");
        let bytes = b.into_inner().expect("tar");
        let root = fresh();
        let err = unpack(&bytes[..], root.path()).expect_err("hard link out");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert_eq!(std::fs::metadata(&victim).expect("victim").nlink(), 1);
    }

    // A symlink pointing out is kept as a link (the sandbox resolves it in its own root), and
    // the file it points to is not touched.
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(
        &mut b,
        b"dangling",
        tar::EntryType::Symlink,
        &victim_bytes,
        b"",
    );
    let bytes = b.into_inner().expect("tar");
    let root = fresh();
    unpack(&bytes[..], root.path()).expect("a symlink is data");
    assert!(std::fs::symlink_metadata(root.path().join("dangling"))
        .expect("link")
        .file_type()
        .is_symlink());

    // A device node is made inside the target only (the sandbox's device cgroup denies its
    // use; the own disk is mounted nodev).
    if is_root() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Char);
        h.set_mode(0o666);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_device_major(1).expect("major");
        h.set_device_minor(1).expect("minor");
        h.set_size(0);
        h.as_old_mut().name[..3].copy_from_slice(b"mem");
        h.set_cksum();
        b.append(&h, &b""[..]).expect("append");
        let bytes = b.into_inner().expect("tar");
        let root = fresh();
        unpack(&bytes[..], root.path()).expect("a device node is contained");
        assert!(root.path().join("mem").exists());
    }

    // A GNU long name declaring 4 GiB is refused at its header, before anything reads it.
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::GNULongName);
    header.set_size(4 << 30);
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_cksum();
    let stream = std::io::Read::chain(&header.as_bytes()[..], std::io::repeat(b'a'));
    let root = fresh();
    let err = unpack(stream, root.path()).expect_err("huge header");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("exceeds"), "{err}");
}

/// A crafted stream (as an imported checkpoint's `fs.tar` may be) with links to a host file at
/// the names the node writes: it unpacks, the identity files then replace the links, and the
/// host file is untouched.
#[test]
fn a_crafted_tree_with_links_at_the_nodes_names_unpacks_and_is_then_replaced() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, b"host").expect("write");
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_ustar();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_uid(0);
    dir.set_gid(0);
    dir.set_mtime(0);
    b.append_data(&mut dir, "etc", std::io::empty())
        .expect("dir");
    for name in [
        "etc/hostname.cove-tmp",
        "etc/hosts.cove-tmp",
        "etc/hosts",
        ".cove",
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o644);
        h.set_size(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_link(&mut h, name, &secret).expect("link");
    }
    let mut fifo = tar::Header::new_ustar();
    fifo.set_entry_type(tar::EntryType::Fifo);
    fifo.set_mode(0o644);
    fifo.set_size(0);
    fifo.set_uid(0);
    fifo.set_gid(0);
    fifo.set_mtime(0);
    fifo.set_device_major(0).expect("major");
    fifo.set_device_minor(0).expect("minor");
    b.append_data(&mut fifo, "etc/hostname", std::io::empty())
        .expect("fifo");
    let archive = b.into_inner().expect("tar");
    let upper = tmp.path().join("upper");
    std::fs::create_dir(&upper).expect("mkdir");
    unpack(&archive[..], &upper).expect("unpack");
    crate::runc::identity::write_identity(&upper, "sbx").expect("identity");
    crate::runc::shift::tree(&upper, (1 << 30) + 65536, 1 << 30).expect("shift");
    assert_eq!(std::fs::read(&secret).expect("read"), b"host");
    assert_eq!(
        std::fs::read(upper.join("etc/hostname")).expect("read"),
        b"sbx\n"
    );
}
