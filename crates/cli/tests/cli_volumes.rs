//! `cove volume` (with its path verbs, and `create --storage object`) and `cove create
//! --volume` against a real server (the e2e harness: runc, `tiny` sandboxes).

use cove_e2e::{client, delete, ensure_template, sh};

mod support;
use support::{cove, ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_create_put_mount_get_ls_rm() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let name = format!("cli-vol-{}", std::process::id());
    assert_eq!(
        ok(&["volume", "create", &name, "--size-mib", "16"])
            .await
            .trim(),
        name
    );
    let local = tempfile::tempdir().expect("tempdir");
    let src = local.path().join("in.txt");
    std::fs::write(&src, "from the cli\n").expect("write");
    ok(&[
        "volume",
        "put",
        &name,
        src.to_str().expect("utf8"),
        "/in/in.txt",
    ])
    .await;

    let mount = format!("{name}:/data");
    let id = ok(&["create", "-t", "tiny", "--volume", &mount]).await;
    let id = id.trim();
    let out = sh(&c, id, "cat /data/in/in.txt && echo back > /data/out.txt").await;
    assert_eq!(out.stdout_text(), "from the cli\n", "{}", out.stderr_text());

    assert_eq!(ok(&["volume", "get", &name, "/out.txt"]).await, "back\n");
    let dst = local.path().join("out.txt");
    ok(&[
        "volume",
        "get",
        &name,
        "/out.txt",
        dst.to_str().expect("utf8"),
    ])
    .await;
    assert_eq!(std::fs::read_to_string(&dst).expect("read"), "back\n");
    let files = ok(&["volume", "files", &name]).await;
    assert!(files.contains("out.txt") && files.contains("in"), "{files}");
    let listed = ok(&["volume", "ls"]).await;
    assert!(listed.contains(&name) && listed.contains(id), "{listed}");

    // Mounted: `rm` fails with the API's code.
    let (code, _, stderr) = cove(&["volume", "rm", &name]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("volume_in_use"), "{stderr}");
    delete(&c, id).await;
    assert_eq!(ok(&["volume", "rm", &name]).await.trim(), name);
    let (code, _, stderr) = cove(&["volume", "get", &name, "/out.txt"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("volume_not_found"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_stat_mkdir_chmod_rm_file() {
    let name = format!("cli-volp-{}", std::process::id());
    ok(&["volume", "create", &name, "--size-mib", "16"]).await;
    assert_eq!(
        ok(&["volume", "mkdir", &name, "/a/b", "--mode", "700"])
            .await
            .trim(),
        "/a/b"
    );
    let (code, _, stderr) = cove(&["volume", "mkdir", &name, "/x/y", "--no-parents"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("file_not_found"), "{stderr}");
    let stat = ok(&["volume", "stat", &name, "/a/b"]).await;
    assert!(
        stat.contains("type:      dir") && stat.contains("mode:      0700"),
        "{stat}"
    );
    assert!(stat.contains("uid:gid:   1000:1000"), "{stat}");
    let changed = ok(&[
        "volume", "chmod", &name, "/a/b", "--mode", "751", "--uid", "0",
    ])
    .await;
    assert!(
        changed.contains("mode:      0751") && changed.contains("uid:gid:   0:1000"),
        "{changed}"
    );
    let tree = ok(&["volume", "files", &name, "/a", "-d", "2"]).await;
    assert!(tree.contains("/a/b"), "{tree}");
    assert_eq!(ok(&["volume", "rm-file", &name, "/a"]).await.trim(), "/a");
    let (code, _, stderr) = cove(&["volume", "stat", &name, "/a"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("file_not_found"), "{stderr}");
    ok(&["volume", "rm", &name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_create_storage_object() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let name = format!("cli-obj-{}", std::process::id());
    let made = ok(&[
        "volume",
        "create",
        &name,
        "--size-mib",
        "16",
        "--storage",
        "object",
        "--json",
    ])
    .await;
    let made: serde_json::Value = serde_json::from_str(&made).expect("json");
    assert_eq!(made["storage"], "object", "{made}");
    let mount = format!("{name}:/data");
    let id = ok(&["create", "-t", "tiny", "--volume", &mount]).await;
    let id = id.trim();
    let out = sh(&c, id, "echo kept > /data/note").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    delete(&c, id).await;
    // Uploaded when its sandbox went; the files API fetches it again.
    assert_eq!(ok(&["volume", "get", &name, "/note"]).await, "kept\n");
    let (code, _, stderr) = cove(&[
        "volume",
        "create",
        "x",
        "--size-mib",
        "16",
        "--storage",
        "s3",
    ])
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("object"), "{stderr}");
    assert_eq!(ok(&["volume", "rm", &name]).await.trim(), name);
}
