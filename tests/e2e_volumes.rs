//! Issue 17, persistent volumes on runc (with user namespaces, the harness's default): a volume
//! written by one sandbox is read by another, owned by `user` there too, and outlives the
//! first; it survives a suspend and wake; a read-only mount refuses writes (`EROFS`); the size
//! is a real limit (`ENOSPC` inside, `507 insufficient_storage` on upload); a mounted volume
//! cannot be deleted (`409 volume_in_use`); its files API cannot be led out of the volume by
//! `..` or symlinks; another org sees none of it; it survives `kill -9` of the server, and the
//! node mounts it again when its mount went while the server was down. A fork mounts its
//! parent's volumes (shared, same paths); a checkpoint holds none of their data. Without a
//! sandbox, a volume's paths are described, made (with parents, owner and mode), re-owned and
//! removed (a directory with its contents), and none of it reaches outside the volume. A create
//! with volumes is served by a warm pool member, the volumes mounted into it at claim.

use std::time::Duration;

use std::os::unix::fs::PermissionsExt;

use cove_api_types::{
    CreateCheckpointRequest, CreateSandboxRequest, ErrorCode, FileType, ForkRequest,
    MakeVolumeDirRequest, OperationState, Quotas, VolumeFileAttrs, VolumeMount,
};
use cove_client::{Client, ClientError};
use cove_e2e::{client, delete, ensure_template, root_sh, sandbox_with, server, sh};

/// A volume name unique to this run (the server is shared by the tests of this binary).
fn vol(tag: &str) -> String {
    format!("{tag}-{}", std::process::id())
}

fn mount(name: &str, path: &str, read_only: bool) -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![VolumeMount {
            name: name.into(),
            path: path.into(),
            read_only,
        }],
        ..Default::default()
    }
}

fn code(err: &ClientError) -> ErrorCode {
    err.api_body()
        .unwrap_or_else(|| panic!("no error body: {err}"))
        .code
}

/// A running `tiny` sandbox with `req`'s mounts on a server of the test's own (unlike
/// `sandbox_with`, it does not mark `tiny` as built for the binary's shared server).
async fn own_sandbox(c: &Client, req: CreateSandboxRequest) -> String {
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..req
    };
    let created = c.create_sandbox(&req, None).await.expect("create");
    wait_ok(c, &created.operation.id).await;
    created.sandbox.id
}

async fn wait_ok(c: &Client, op: &str) {
    let op = c
        .wait_operation(op, Duration::from_secs(120))
        .await
        .expect("operation finishes");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_shared_outlives_its_writer_and_survives_suspend() {
    let c = client();
    let name = vol("shared");
    let created = c.create_volume(&name, 64).await.expect("create");
    assert_eq!((created.size_mib, created.mounted_by.len()), (64, 0));

    let a = sandbox_with(&c, "tiny", mount(&name, "/data", false)).await;
    let out = sh(
        &c,
        &a,
        "echo hello > /data/note && stat -c '%U %u' /data/note",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert_eq!(out.stdout_text().trim(), "user 1000");
    assert_eq!(
        c.volume(&name).await.expect("get").mounted_by,
        vec![a.clone()]
    );
    delete(&c, &a).await;

    // Another sandbox (another id range) sees the file, owned by its own `user`.
    let b = sandbox_with(&c, "tiny", mount(&name, "/home/user/work", false)).await;
    let out = sh(
        &c,
        &b,
        "cat work/note && stat -c '%U %u' work/note && echo more >> work/note",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "hello\nuser 1000\n");
    // The files API reads it without a sandbox, with the volume's ids.
    assert_eq!(
        c.read_volume_file(&name, "/note").await.expect("read"),
        b"hello\nmore\n"
    );
    let listed = c.list_volume_files(&name, "/").await.expect("list");
    let note = listed
        .entries
        .iter()
        .find(|e| e.name == "note")
        .expect("note");
    assert_eq!((note.owner.as_str(), note.size), ("1000", 11));

    // Suspend and wake: the mount comes back with the data.
    let op = c.suspend_sandbox(&b).await.expect("suspend");
    wait_ok(&c, &op.id).await;
    let op = c.wake_sandbox(&b).await.expect("wake");
    wait_ok(&c, &op.id).await;
    let out = sh(&c, &b, "cat /home/user/work/note").await;
    assert_eq!(out.stdout_text(), "hello\nmore\n", "{}", out.stderr_text());

    // Read-only: reads work, writes fail with EROFS, even as root.
    let r = sandbox_with(&c, "tiny", mount(&name, "/ro", true)).await;
    let out = root_sh(&c, &r, "cat /ro/note; echo x > /ro/other").await;
    assert_ne!(out.command.exit_code, Some(0));
    assert_eq!(out.stdout_text(), "hello\nmore\n");
    assert!(
        out.stderr_text().contains("Read-only file system"),
        "{}",
        out.stderr_text()
    );

    // Mounted: no delete.
    let err = c.delete_volume(&name).await.expect_err("in use");
    assert_eq!(code(&err), ErrorCode::VolumeInUse, "{err}");
    assert_eq!(err.status(), Some(409));
    delete(&c, &b).await;
    delete(&c, &r).await;
    c.delete_volume(&name).await.expect("delete");
    let err = c.volume(&name).await.expect_err("gone");
    assert_eq!(code(&err), ErrorCode::VolumeNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_mounts_its_parents_volumes_and_checkpoints_hold_none_of_their_data() {
    let c = client();
    let name = vol("forked");
    c.create_volume(&name, 64).await.expect("create");
    let parent = sandbox_with(&c, "tiny", mount(&name, "/data", false)).await;
    let out = sh(&c, &parent, "echo one > /data/v && echo one > /home/user/f").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());

    let forked = c
        .fork_sandbox(
            &parent,
            &ForkRequest {
                count: 1,
                ..Default::default()
            },
        )
        .await
        .expect("fork");
    let fork = forked.sandboxes[0].sandbox.id.clone();
    wait_ok(&c, &forked.sandboxes[0].operation.id).await;
    assert_eq!(
        c.get_sandbox(&fork).await.expect("fork").volumes,
        c.get_sandbox(&parent).await.expect("parent").volumes
    );
    // The fork sees the volume's file at the same path, and writes there reach the parent:
    // the volume is shared, not copied.
    let out = sh(&c, &fork, "cat /data/v /home/user/f && echo two >> /data/v").await;
    assert_eq!(out.stdout_text(), "one\none\n", "{}", out.stderr_text());
    let out = sh(&c, &parent, "cat /data/v").await;
    assert_eq!(out.stdout_text(), "one\ntwo\n", "{}", out.stderr_text());

    // A rollback brings back the sandbox's own files, not the volume's.
    let ck = c
        .create_checkpoint(&parent, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    wait_ok(&c, &ck.operation.id).await;
    let out = sh(
        &c,
        &parent,
        "echo three >> /data/v && echo changed > /home/user/f",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    let op = c
        .rollback_sandbox(&parent, &ck.checkpoint.id)
        .await
        .expect("rollback");
    wait_ok(&c, &op.id).await;
    let out = sh(&c, &parent, "cat /home/user/f /data/v").await;
    assert_eq!(
        out.stdout_text(),
        "one\none\ntwo\nthree\n",
        "{}",
        out.stderr_text()
    );

    for id in [&fork, &parent] {
        delete(&c, id).await;
    }
    c.delete_volume(&name).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_is_a_real_limit() {
    let c = client();
    let name = vol("small");
    c.create_volume(&name, 16).await.expect("create");
    let s = sandbox_with(&c, "tiny", mount(&name, "/data", false)).await;
    // Writing past 16 MiB inside fails with ENOSPC (as root too: no blocks are reserved).
    let out = root_sh(
        &c,
        &s,
        "dd if=/dev/zero of=/data/big bs=1048576 count=64 2>&1; echo rc=$?",
    )
    .await;
    let text = out.stdout_text();
    assert!(text.contains("No space left on device"), "{text}");
    assert!(!text.contains("rc=0"), "{text}");
    // An upload that does not fit answers 507, and leaves nothing.
    let before = c
        .list_volume_files(&name, "/")
        .await
        .expect("list")
        .entries
        .len();
    let err = c
        .upload_to_volume(&name, "/upload.bin", vec![7u8; 32 << 20])
        .await
        .expect_err("does not fit");
    assert_eq!(err.status(), Some(507), "{err}");
    assert_eq!(code(&err), ErrorCode::InsufficientStorage);
    let after = c.list_volume_files(&name, "/").await.expect("list").entries;
    assert_eq!(after.len(), before, "{after:?}");
    // Once there is room again, the same upload of a smaller size fits.
    let out = root_sh(&c, &s, "rm /data/big").await;
    assert_eq!(out.command.exit_code, Some(0));
    let info = c
        .upload_to_volume(&name, "/upload.bin", vec![7u8; 4 << 20])
        .await
        .expect("fits");
    assert_eq!(info.size, 4 << 20);
    delete(&c, &s).await;
    c.delete_volume(&name).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_api_stays_inside_the_volume() {
    let c = client();
    let name = vol("escape");
    c.create_volume(&name, 16).await.expect("create");
    // `..` stops at the volume's root.
    c.upload_to_volume(&name, "../../../tmp/cove-volume-escape", "x")
        .await
        .expect("upload");
    assert!(!std::path::Path::new("/tmp/cove-volume-escape").exists());
    assert_eq!(
        c.read_volume_file(&name, "/tmp/cove-volume-escape")
            .await
            .expect("inside"),
        b"x"
    );
    // Symlinks a sandbox made resolve inside the volume, never on the host.
    let s = sandbox_with(&c, "tiny", mount(&name, "/data", false)).await;
    let out = sh(
        &c,
        &s,
        "ln -s /etc/passwd /data/pw && ln -s ../../.. /data/up && mkdir /data/sub \
         && ln -s /sub /data/l",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    for path in ["/pw", "/up/etc/passwd", "up/../../etc/hostname"] {
        let err = c.read_volume_file(&name, path).await.expect_err(path);
        assert_eq!(code(&err), ErrorCode::FileNotFound, "{path}: {err}");
    }
    // A write through an absolute symlink lands inside the volume.
    c.upload_to_volume(&name, "/l/cove-written", "y")
        .await
        .expect("write through the link");
    assert!(!std::path::Path::new("/sub/cove-written").exists());
    let out = sh(&c, &s, "cat /data/sub/cove-written").await;
    assert_eq!(out.stdout_text(), "y", "{}", out.stderr_text());
    delete(&c, &s).await;
    c.delete_volume(&name).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_are_described_made_reowned_and_removed_without_a_sandbox() {
    let c = client();
    let name = vol("ops");
    c.create_volume(&name, 16).await.expect("create");
    let mkdir = |path: &str, parents: Option<bool>| MakeVolumeDirRequest {
        path: path.into(),
        parents,
        ..Default::default()
    };

    // mkdir -p with an owner and a mode; without `parents`, a missing parent and an existing
    // path are refused.
    let d = c
        .make_volume_dir(
            &name,
            &MakeVolumeDirRequest {
                uid: Some(0),
                gid: Some(0),
                // Others may pass through: a sandbox's `user` reads below it later.
                mode: Some(0o711),
                ..mkdir("/a/b", None)
            },
        )
        .await
        .expect("mkdir -p");
    assert_eq!(
        (d.file_type, d.path.as_str(), d.mode, d.uid, d.gid),
        (FileType::Dir, "/a/b", 0o711, Some(0), Some(0))
    );
    let err = c
        .make_volume_dir(&name, &mkdir("/x/y", Some(false)))
        .await
        .expect_err("no parent");
    assert_eq!(code(&err), ErrorCode::FileNotFound, "{err}");
    let err = c
        .make_volume_dir(&name, &mkdir("/a", Some(false)))
        .await
        .expect_err("exists");
    assert_eq!(code(&err), ErrorCode::AlreadyExists, "{err}");
    c.make_volume_dir(&name, &mkdir("/a", None))
        .await
        .expect("mkdir -p of an existing directory");

    // A written file is described with its numeric owner and times; a listing goes deep.
    c.upload_to_volume(&name, "/a/b/f.txt", "hello")
        .await
        .expect("upload");
    let f = c.stat_volume_file(&name, "a/b/f.txt").await.expect("stat");
    assert_eq!(
        (f.file_type, f.size, f.mode, f.uid, f.gid),
        (FileType::File, 5, 0o644, Some(1000), Some(1000))
    );
    assert!(f.atime.is_some() && f.ctime.is_some());
    let tree: Vec<String> = c
        .list_volume_tree(&name, "/a", 2)
        .await
        .expect("list")
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(tree, ["/a/b", "/a/b/f.txt"]);
    let err = c.list_volume_tree(&name, "/a", 0).await.expect_err("depth");
    assert_eq!(code(&err), ErrorCode::InvalidArgument, "{err}");

    // Owner and mode; what is absent is kept; a mode beyond 0o7777 is refused.
    let attrs = VolumeFileAttrs {
        mode: Some(0o600),
        ..Default::default()
    };
    let f = c
        .set_volume_file_attrs(&name, "/a/b/f.txt", &attrs)
        .await
        .expect("chmod");
    assert_eq!((f.mode, f.uid), (0o600, Some(1000)));
    let bad = VolumeFileAttrs {
        mode: Some(0o10000),
        ..Default::default()
    };
    let err = c
        .set_volume_file_attrs(&name, "/a/b/f.txt", &bad)
        .await
        .expect_err("mode");
    assert_eq!(code(&err), ErrorCode::InvalidArgument, "{err}");

    // A sandbox that mounts the volume sees all of it; its symlinks lead nowhere outside.
    let s = sandbox_with(&c, "tiny", mount(&name, "/data", false)).await;
    let out = sh(
        &c,
        &s,
        "stat -c '%a %s' /data/a/b/f.txt && ln -s /etc /data/hostetc && ln -s ../../.. /data/up",
    )
    .await;
    assert_eq!(out.stdout_text(), "600 5\n", "{}", out.stderr_text());
    let link = c
        .stat_volume_file(&name, "/hostetc")
        .await
        .expect("stat link");
    assert_eq!(
        (link.file_type, link.symlink_target.as_deref()),
        (FileType::Symlink, Some("/etc"))
    );
    let host_mode = || {
        std::fs::metadata("/etc/passwd")
            .expect("host passwd")
            .permissions()
            .mode()
    };
    let before = host_mode();
    for path in ["/hostetc/passwd", "/up/etc/passwd", "../../../etc/passwd"] {
        let err = c
            .set_volume_file_attrs(&name, path, &attrs)
            .await
            .expect_err(path);
        assert_eq!(code(&err), ErrorCode::FileNotFound, "{path}: {err}");
        let err = c.remove_volume_file(&name, path).await.expect_err(path);
        assert_eq!(code(&err), ErrorCode::FileNotFound, "{path}: {err}");
    }
    assert_eq!(host_mode(), before);
    // mkdir through `up` lands in the volume.
    c.make_volume_dir(&name, &mkdir("/up/made", None))
        .await
        .expect("mkdir through a link");
    assert!(!std::path::Path::new("/made").exists());
    c.stat_volume_file(&name, "/made").await.expect("inside");
    // A symlink is removed, not its target; the root cannot be.
    c.remove_volume_file(&name, "/hostetc")
        .await
        .expect("rm link");
    assert!(std::path::Path::new("/etc/passwd").exists());
    for path in ["/", "..", "/a/.."] {
        let err = c.remove_volume_file(&name, path).await.expect_err(path);
        assert_eq!(code(&err), ErrorCode::InvalidArgument, "{path}: {err}");
    }
    // A directory goes with everything below it.
    c.remove_volume_file(&name, "/a").await.expect("rm -r");
    let err = c.stat_volume_file(&name, "/a/b").await.expect_err("gone");
    assert_eq!(code(&err), ErrorCode::FileNotFound, "{err}");
    let out = sh(&c, &s, "ls /data").await;
    let listed = out.stdout_text();
    let names: Vec<&str> = listed.lines().collect();
    assert!(
        names.contains(&"made") && !names.contains(&"a") && !names.contains(&"hostetc"),
        "{names:?}"
    );
    delete(&c, &s).await;
    c.delete_volume(&name).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_are_checked_and_other_orgs_see_nothing() {
    let s = server();
    let c = client();
    ensure_template(&c, "tiny").await;
    let name = vol("checked");
    c.create_volume(&name, 16).await.expect("create");
    let err = c.create_volume(&name, 16).await.expect_err("taken");
    assert_eq!(code(&err), ErrorCode::VolumeExists);
    let err = c.create_volume("Bad/Name", 16).await.expect_err("bad name");
    assert_eq!(code(&err), ErrorCode::InvalidArgument);

    let refused = |mounts: Vec<(&str, &str)>| {
        let mut req = CreateSandboxRequest {
            template: Some("tiny".into()),
            ..Default::default()
        };
        req.volumes = mounts
            .into_iter()
            .map(|(n, p)| VolumeMount {
                name: n.into(),
                path: p.into(),
                read_only: false,
            })
            .collect();
        req
    };
    for (mounts, want) in [
        (vec![(name.as_str(), "data")], ErrorCode::InvalidArgument),
        (vec![(name.as_str(), "/")], ErrorCode::InvalidArgument),
        (vec![(name.as_str(), "/proc/x")], ErrorCode::InvalidArgument),
        (vec![(name.as_str(), "/sys")], ErrorCode::InvalidArgument),
        (vec![(name.as_str(), "/dev/v")], ErrorCode::InvalidArgument),
        (vec![(name.as_str(), "/a/../b")], ErrorCode::InvalidArgument),
        (
            vec![(name.as_str(), "/a"), (name.as_str(), "/b")],
            ErrorCode::InvalidArgument,
        ),
        (vec![("nope", "/a")], ErrorCode::VolumeNotFound),
    ] {
        let err = c
            .create_sandbox(&refused(mounts.clone()), None)
            .await
            .expect_err("refused");
        assert_eq!(code(&err), want, "{mounts:?}: {err}");
    }

    // Another org: the volume does not exist for it.
    let org = format!("vol-org-{}", std::process::id());
    c.create_org(&org, Quotas::default()).await.expect("org");
    let key = c.create_api_key(&org, "e2e").await.expect("key");
    let other = Client::new(&s.api_url, key.secret.clone()).expect("client");
    assert_eq!(
        code(&other.volume(&name).await.expect_err("hidden")),
        ErrorCode::VolumeNotFound
    );
    assert!(other.volumes().await.expect("list").volumes.is_empty());
    assert_eq!(
        code(&other.delete_volume(&name).await.expect_err("hidden")),
        ErrorCode::VolumeNotFound
    );
    assert_eq!(
        code(
            &other
                .read_volume_file(&name, "/x")
                .await
                .expect_err("hidden")
        ),
        ErrorCode::VolumeNotFound
    );
    let err = other
        .create_sandbox(&refused(vec![(name.as_str(), "/data")]), None)
        .await
        .expect_err("hidden");
    assert_eq!(code(&err), ErrorCode::VolumeNotFound);
    // Its own volume of the same name is another volume.
    other
        .create_volume(&name, 16)
        .await
        .expect("same name, other org");
    other
        .upload_to_volume(&name, "/mine", "b")
        .await
        .expect("upload");
    let err = c
        .read_volume_file(&name, "/mine")
        .await
        .expect_err("not ours");
    assert_eq!(code(&err), ErrorCode::FileNotFound);
    other.delete_volume(&name).await.expect("delete");
    c.delete_volume(&name).await.expect("delete");
}

/// A volume across `kill -9` of the server: the running sandbox is adopted with its mount and
/// keeps writing to it; a suspend and wake binds it again; with the node's mount of the volume
/// gone while the server was down (as after a reboot), the next sandbox mounts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_survives_a_server_restart_and_is_mounted_again() {
    let mut server = cove_e2e::server_process::ServerProcess::new(
        std::path::Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")),
        30_000,
    );
    let mut c = server.start().await;
    // Its own server: `ensure_template` remembers the shared server's builds.
    cove_e2e::build_template(&c, "tiny").await;
    let name = vol("restart");
    c.create_volume(&name, 16).await.expect("create");
    let a = own_sandbox(&c, mount(&name, "/data", false)).await;
    let out = sh(&c, &a, "echo before > /data/note").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());

    server.kill9();
    c = server.start().await;
    let out = sh(&c, &a, "echo after >> /data/note && cat /data/note").await;
    assert_eq!(
        out.stdout_text(),
        "before\nafter\n",
        "{}",
        out.stderr_text()
    );
    let op = c.suspend_sandbox(&a).await.expect("suspend");
    wait_ok(&c, &op.id).await;
    let op = c.wake_sandbox(&a).await.expect("wake");
    wait_ok(&c, &op.id).await;
    let out = sh(&c, &a, "cat /data/note").await;
    assert_eq!(
        out.stdout_text(),
        "before\nafter\n",
        "{}",
        out.stderr_text()
    );
    delete(&c, &a).await;

    // The node's mount of the volume goes while the server is down.
    server.kill9();
    let mounts = std::fs::read_dir(server.data_dir.join("volumes")).expect("volumes dir");
    for v in mounts.flatten() {
        let out = std::process::Command::new("umount")
            .arg(v.path().join("mnt"))
            .output()
            .expect("umount");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    c = server.start().await;
    let b = own_sandbox(&c, mount(&name, "/data", true)).await;
    let out = sh(&c, &b, "cat /data/note").await;
    assert_eq!(
        out.stdout_text(),
        "before\nafter\n",
        "{}",
        out.stderr_text()
    );
    delete(&c, &b).await;
    c.delete_volume(&name).await.expect("delete");
}

/// Without user namespaces the sandboxes bind the node's mount itself: the same sharing,
/// owners and read-only mounts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_work_without_user_namespaces() {
    let mut server = cove_e2e::server_process::ServerProcess::new(
        std::path::Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")),
        30_000,
    );
    server.env = vec![("COVE_E2E_USER_NAMESPACES".into(), "off".into())];
    let c = server.start().await;
    assert!(!c.capabilities().await.expect("caps").user_namespaces);
    cove_e2e::build_template(&c, "tiny").await;
    let name = vol("plain");
    c.create_volume(&name, 16).await.expect("create");
    let a = own_sandbox(&c, mount(&name, "/data", false)).await;
    let out = sh(
        &c,
        &a,
        "echo plain > /data/note && stat -c '%U %u' /data/note",
    )
    .await;
    assert_eq!(out.stdout_text(), "user 1000\n", "{}", out.stderr_text());
    let b = own_sandbox(&c, mount(&name, "/ro", true)).await;
    let out = root_sh(&c, &b, "cat /ro/note; stat -c %u /ro/note; touch /ro/x").await;
    assert_eq!(out.stdout_text(), "plain\n1000\n");
    assert!(
        out.stderr_text().contains("Read-only file system"),
        "{}",
        out.stderr_text()
    );
    delete(&c, &a).await;
    delete(&c, &b).await;
    c.delete_volume(&name).await.expect("delete");
}

/// Issue 30: a create that mounts volumes is served by a warm pool member on runc, the volume
/// mounted into the running member at claim with a cold start's binds (owned by `user` through
/// the member's id range, `nosuid,nodev`, read-only when asked): it sees the volume's files, and
/// what it writes stays in the volume after the sandbox is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_create_with_volumes_is_served_warm_and_writes_persist() {
    let c = client();
    ensure_template(&c, "tiny").await;
    // A size no other test of this binary asks for: only this test's creates match the pool.
    let size = Some(cove_api_types::ResourcesRequest {
        memory_mib: Some(336),
        ..Default::default()
    });
    let put = cove_api_types::PutPoolRequest {
        template: "tiny".into(),
        release: None,
        resources: size.clone(),
        min_ready: 2,
        max: 2,
    };
    c.put_pool("e2e-vol-warm", &put).await.expect("put pool");
    let start = std::time::Instant::now();
    while c.pool("e2e-vol-warm").await.expect("pool").ready < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pool never filled"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let name = vol("pooled");
    c.create_volume(&name, 32).await.expect("create");
    c.upload_to_volume(&name, "/seed", b"seeded\n".to_vec())
        .await
        .expect("seed");
    let claim = |path: &str, read_only: bool| CreateSandboxRequest {
        template: Some("tiny".into()),
        resources: size.clone(),
        ..mount(&name, path, read_only)
    };

    // A path that does not exist in the release: made on the way.
    let created = c
        .create_sandbox(&claim("/home/user/work/data", false), None)
        .await
        .expect("create");
    let a = created.sandbox.id.clone();
    assert_eq!(
        created.sandbox.state,
        cove_api_types::SandboxState::Running,
        "served by the pool"
    );
    assert_eq!(
        c.pool("e2e-vol-warm").await.expect("pool").hits,
        1,
        "a claim"
    );
    let out = sh(
        &c,
        &a,
        "cat /home/user/work/data/seed && echo pooled > /home/user/work/data/note && \
         stat -c '%U %u' /home/user/work/data/note && \
         grep ' /home/user/work/data ' /proc/self/mountinfo",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    let text = out.stdout_text();
    assert!(text.starts_with("seeded\nuser 1000\n"), "{text}");
    assert!(
        text.contains("nosuid") && text.contains("nodev") && text.contains(" rw"),
        "{text}"
    );
    assert_eq!(
        c.volume(&name).await.expect("get").mounted_by,
        vec![a.clone()]
    );

    // Read-only, into an existing directory: reads work, writes fail with EROFS, even as root.
    let created = c
        .create_sandbox(&claim("/tmp", true), None)
        .await
        .expect("create");
    let r = created.sandbox.id.clone();
    assert_eq!(created.sandbox.state, cove_api_types::SandboxState::Running);
    assert_eq!(c.pool("e2e-vol-warm").await.expect("pool").hits, 2);
    let out = root_sh(&c, &r, "cat /tmp/note; echo x > /tmp/other").await;
    assert_eq!(out.stdout_text(), "pooled\n");
    assert!(
        out.stderr_text().contains("Read-only file system"),
        "{}",
        out.stderr_text()
    );
    c.delete_pool("e2e-vol-warm").await.expect("delete pool");

    let err = c.delete_volume(&name).await.expect_err("in use");
    assert_eq!(code(&err), ErrorCode::VolumeInUse, "{err}");
    delete(&c, &a).await;
    delete(&c, &r).await;
    assert_eq!(
        c.read_volume_file(&name, "/note").await.expect("read"),
        b"pooled\n",
        "written by a claimed member, kept after its delete"
    );
    c.delete_volume(&name).await.expect("delete");
}

/// A pool member whose tree has a symbolic link at a create's mount path (planted by its
/// template here, as root in a sandbox could) is refused, not followed: the create fails with
/// `invalid_argument`, the member is deleted, nothing is mounted through the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_the_mount_path_of_a_pool_member_is_not_followed() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let (state, _, log) = cove_e2e::build_file(
        &c,
        "linked",
        "FROM tiny\nRUN mkdir -p /srv/inner && ln -s /srv/inner /srv/link && ln -s /etc /data\n",
        Default::default(),
    )
    .await;
    assert_eq!(state, OperationState::Succeeded, "{log:?}");
    let put = cove_api_types::PutPoolRequest {
        template: "linked".into(),
        release: None,
        resources: None,
        min_ready: 2,
        max: 2,
    };
    c.put_pool("e2e-vol-linked", &put).await.expect("put pool");
    let start = std::time::Instant::now();
    while c.pool("e2e-vol-linked").await.expect("pool").ready < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pool never filled"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let name = vol("linked");
    c.create_volume(&name, 16).await.expect("create");
    for path in ["/data", "/srv/link/deeper"] {
        let req = CreateSandboxRequest {
            template: Some("linked".into()),
            ..mount(&name, path, false)
        };
        let err = c.create_sandbox(&req, None).await.expect_err(path);
        assert_eq!(code(&err), ErrorCode::InvalidArgument, "{path}: {err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
    assert_eq!(
        c.pool("e2e-vol-linked").await.expect("pool").hits,
        2,
        "both were claims"
    );
    c.delete_pool("e2e-vol-linked").await.expect("delete pool");
    // The refused members are deleted: the volume is mounted nowhere and goes.
    let start = std::time::Instant::now();
    loop {
        match c.delete_volume(&name).await {
            Ok(()) => break,
            Err(e) => {
                assert_eq!(code(&e), ErrorCode::VolumeInUse, "{e}");
                assert!(start.elapsed() < Duration::from_secs(60), "still in use");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
