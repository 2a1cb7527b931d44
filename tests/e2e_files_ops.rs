//! The file API beyond transfers: list with depth (symlinks, broken ones too), stat (lstat),
//! mkdir, move, remove, exists; names as bytes (whitespace, newline, unicode, leading dash,
//! invalid UTF-8) round-trip; NUL and over-long names are `400 invalid_argument`.

use base64::Engine;
use cove_api_types::{ErrorCode, FileInfo, FileType};
use cove_client::{ClientError, SandboxPath, UploadOptions};
use cove_e2e::{client, delete, root_sh, sandbox, sh};

fn code(e: &ClientError) -> ErrorCode {
    e.api_body().map(|b| b.code).unwrap_or(ErrorCode::Internal)
}

fn entry<'a>(entries: &'a [FileInfo], path: &str) -> &'a FileInfo {
    entries
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("{path} not listed in {entries:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_depth_and_symlinks() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let o = sh(
        &c,
        &id,
        "mkdir -p /tmp/l/a/b && printf 12345 > /tmp/l/f && touch /tmp/l/a/x /tmp/l/a/b/y && \
         ln -s /nonexistent /tmp/l/broken && ln -s /etc /tmp/l/etc-link && \
         touch -d '2001-02-03 04:05:06.789 UTC' /tmp/l/f && echo ok",
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n");

    let one = c.list_files(&id, "/tmp/l", 1).await.expect("list").entries;
    let names: Vec<&str> = one.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a", "broken", "etc-link", "f"]);
    let f = entry(&one, "/tmp/l/f");
    assert_eq!((f.file_type, f.size, f.mode), (FileType::File, 5, 0o644));
    assert_eq!((f.owner.as_str(), f.group.as_str()), ("user", "user"));
    assert_eq!(
        f.mtime.timestamp_millis(),
        981_173_106_789,
        "2001-02-03T04:05:06.789Z"
    );
    let broken = entry(&one, "/tmp/l/broken");
    assert_eq!(broken.file_type, FileType::Symlink);
    assert_eq!(broken.symlink_target.as_deref(), Some("/nonexistent"));
    assert_eq!(broken.size, "/nonexistent".len() as u64);
    let link = entry(&one, "/tmp/l/etc-link");
    assert_eq!(
        (link.file_type, link.symlink_target.as_deref(), link.size),
        (FileType::Symlink, Some("/etc"), 4),
        "a link is described by its own lstat, not its target's"
    );
    assert_eq!(entry(&one, "/tmp/l/a").file_type, FileType::Dir);

    let two = c.list_files(&id, "/tmp/l", 2).await.expect("list").entries;
    let paths: Vec<&str> = two.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/tmp/l/a",
            "/tmp/l/a/b",
            "/tmp/l/a/x",
            "/tmp/l/broken",
            "/tmp/l/etc-link",
            "/tmp/l/f"
        ],
        "symlinks are never descended"
    );
    let three = c.list_files(&id, "/tmp/l", 3).await.expect("list").entries;
    assert_eq!(three.len(), 7);
    entry(&three, "/tmp/l/a/b/y");

    // The wire form: mtime in RFC 3339 with its zone, `type` names.
    let s = cove_e2e::server();
    let raw: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/sandboxes/{id}/files:list", s.api_url))
        .query(&[("path", "/tmp/l"), ("depth", "1")])
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let first = &raw["entries"][3];
    assert_eq!(first["type"], "file");
    assert_eq!(first["mtime"], "2001-02-03T04:05:06.789Z");

    for (path, depth, want) in [
        ("/tmp/l/f", 1, ErrorCode::InvalidArgument),
        ("/tmp/nope", 1, ErrorCode::FileNotFound),
        ("/tmp/l", 0, ErrorCode::InvalidArgument),
        ("/tmp/l", 65, ErrorCode::InvalidArgument),
    ] {
        let err = c.list_files(&id, path, depth).await.expect_err("refused");
        assert_eq!(code(&err), want, "{path} depth {depth}");
    }
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_mkdir_move_remove_exists() {
    let c = client();
    let id = sandbox(&c, "base").await;
    sh(
        &c,
        &id,
        "ln -s /etc/hostname /tmp/hl && mkdir -p /tmp/d/in && touch /tmp/d/in/f",
    )
    .await;

    let link = c.stat_file(&id, "/tmp/hl").await.expect("stat");
    assert_eq!(link.file_type, FileType::Symlink, "stat is lstat");
    assert_eq!(link.symlink_target.as_deref(), Some("/etc/hostname"));
    let dir = c.stat_file(&id, "/tmp/d").await.expect("stat");
    assert_eq!((dir.file_type, dir.name.as_str()), (FileType::Dir, "d"));
    let err = c.stat_file(&id, "/tmp/missing").await.expect_err("404");
    assert_eq!(
        (err.status(), code(&err)),
        (Some(404), ErrorCode::FileNotFound)
    );

    let made = c.make_dir(&id, "/tmp/mk/a/b", None).await.expect("mkdir");
    assert_eq!(
        (made.file_type, made.owner.as_str()),
        (FileType::Dir, "user")
    );
    c.make_dir(&id, "/tmp/mk/a/b", None)
        .await
        .expect("mkdir -p is idempotent");
    let rooted = c
        .make_dir(&id, "/tmp/mk/r", Some("root"))
        .await
        .expect("mkdir");
    assert_eq!(rooted.owner, "root");
    let err = c
        .make_dir(&id, "/tmp/d/in/f", None)
        .await
        .expect_err("a file");
    assert_eq!(code(&err), ErrorCode::AlreadyExists);
    assert_eq!(
        sh(&c, &id, "stat -c '%U %a' /tmp/mk /tmp/mk/a /tmp/mk/a/b")
            .await
            .stdout_text(),
        "user 755\nuser 755\nuser 755\n"
    );

    assert!(c.file_exists(&id, "/tmp/hl").await.expect("exists"));
    assert!(c.file_exists(&id, "/tmp/d").await.expect("exists"));
    assert!(!c.file_exists(&id, "/tmp/missing").await.expect("exists"));
    assert!(!c
        .file_exists(&id, "/etc/hostname/below-a-file")
        .await
        .expect("exists"));
    sh(&c, &id, "ln -s /nonexistent /tmp/dangling").await;
    assert!(c
        .file_exists(&id, "/tmp/dangling")
        .await
        .expect("a broken link exists"));

    let moved = c
        .move_file(&id, "/tmp/d", "/tmp/mk/moved")
        .await
        .expect("move");
    assert_eq!(
        (moved.path.as_str(), moved.file_type),
        ("/tmp/mk/moved", FileType::Dir)
    );
    assert!(!c.file_exists(&id, "/tmp/d").await.expect("exists"));
    assert!(c
        .file_exists(&id, "/tmp/mk/moved/in/f")
        .await
        .expect("exists"));
    c.upload(&id, "/tmp/src.txt", "new", &UploadOptions::default())
        .await
        .expect("upload");
    c.upload(&id, "/tmp/dst.txt", "old", &UploadOptions::default())
        .await
        .expect("upload");
    c.move_file(&id, "/tmp/src.txt", "/tmp/dst.txt")
        .await
        .expect("replace");
    assert_eq!(
        c.read_file(&id, "/tmp/dst.txt").await.expect("read"),
        b"new"
    );
    let err = c
        .move_file(&id, "/tmp/none", "/tmp/x")
        .await
        .expect_err("404");
    assert_eq!(code(&err), ErrorCode::FileNotFound);

    // Remove: a file, a link to a directory (the link only), a tree; a missing path is 404.
    sh(&c, &id, "ln -s /tmp/mk /tmp/mk-link").await;
    c.remove_file(&id, "/tmp/mk-link").await.expect("rm link");
    assert!(c
        .file_exists(&id, "/tmp/mk/moved/in/f")
        .await
        .expect("target intact"));
    c.remove_file(&id, "/tmp/dst.txt").await.expect("rm file");
    c.remove_file(&id, "/tmp/mk").await.expect("rm tree");
    assert_eq!(
        sh(&c, &id, "ls -d /tmp/mk /tmp/dst.txt /tmp/mk-link 2>&1 | wc -l; test -e /etc/hostname && echo intact")
            .await
            .stdout_text(),
        "3\nintact\n"
    );
    let err = c.remove_file(&id, "/tmp/mk").await.expect_err("gone");
    assert_eq!(
        (err.status(), code(&err)),
        (Some(404), ErrorCode::FileNotFound)
    );
    let err = c.remove_file(&id, "/").await.expect_err("never /");
    assert_eq!(code(&err), ErrorCode::InvalidArgument);
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_bytes_and_round_trip() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let names: [&[u8]; 6] = [
        b"-leading-dash",
        b"with space",
        b"new\nline",
        "\u{00fc}n\u{00ef}c\u{00f6}d\u{00e9} \u{1f600}".as_bytes(),
        b"  spaces around  ",
        b"bad\xff\xfe utf8",
    ];
    for (i, name) in names.iter().enumerate() {
        let mut path = b"/tmp/names/".to_vec();
        path.extend_from_slice(name);
        let info = c
            .upload(
                &id,
                SandboxPath::Bytes(&path),
                format!("content {i}"),
                &UploadOptions::default(),
            )
            .await
            .expect("upload");
        assert_eq!(info.size, format!("content {i}").len() as u64);
        let back = c
            .read_file(&id, SandboxPath::Bytes(&path))
            .await
            .expect("read");
        assert_eq!(back, format!("content {i}").as_bytes());
    }
    let listed = c
        .list_files(&id, "/tmp/names", 1)
        .await
        .expect("list")
        .entries;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut got: Vec<Vec<u8>> = listed
        .iter()
        .map(|e| match &e.name_b64 {
            Some(b) => b64.decode(b).expect("b64"),
            None => e.name.clone().into_bytes(),
        })
        .collect();
    got.sort();
    let mut want: Vec<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
    want.sort();
    assert_eq!(got, want);
    let bad = listed
        .iter()
        .find(|e| e.name_b64.is_some())
        .expect("a non-UTF-8 name");
    assert_eq!(bad.name, "bad\u{fffd}\u{fffd} utf8");
    assert!(bad.path_b64.is_some());
    // The sandbox sees exactly these names (NUL-separated, so newlines survive).
    let o = sh(
        &c,
        &id,
        "cd /tmp/names && for f in * .*; do [ -f \"$f\" ] && printf '%s\\0' \"$f\"; done",
    )
    .await;
    let mut seen: Vec<Vec<u8>> = o
        .stdout
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    seen.sort();
    assert_eq!(seen, want);
    // Rename and remove by bytes too.
    c.move_file(
        &id,
        SandboxPath::Bytes(b"/tmp/names/new\nline"),
        SandboxPath::Bytes(b"/tmp/names/-x\xff"),
    )
    .await
    .expect("move");
    c.remove_file(&id, SandboxPath::Bytes(b"/tmp/names/-x\xff"))
        .await
        .expect("rm");
    assert_eq!(
        root_sh(&c, &id, "ls /tmp/names | wc -l")
            .await
            .stdout_text(),
        // Five names are left, none with a newline, so `ls` prints one per line.
        "5\n"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_and_over_long_names_are_400() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let long_name = format!("/tmp/{}", "n".repeat(256));
    let ok_name = format!("/tmp/{}", "n".repeat(255));
    let long_path = format!("/tmp{}", "/abcdefgh".repeat(456));
    let bad_paths: Vec<Vec<u8>> = vec![
        b"/tmp/a\0b".to_vec(),
        long_name.clone().into_bytes(),
        long_path.clone().into_bytes(),
        Vec::new(),
    ];
    for p in &bad_paths {
        let shown = String::from_utf8_lossy(p)
            .chars()
            .take(40)
            .collect::<String>();
        let errs = [
            c.upload(&id, SandboxPath::Bytes(p), "x", &UploadOptions::default())
                .await
                .err(),
            c.read_file(&id, SandboxPath::Bytes(p)).await.err(),
            c.stat_file(&id, SandboxPath::Bytes(p)).await.err(),
            c.list_files(&id, SandboxPath::Bytes(p), 1).await.err(),
            c.make_dir(&id, SandboxPath::Bytes(p), None).await.err(),
            c.remove_file(&id, SandboxPath::Bytes(p)).await.err(),
            c.file_exists(&id, SandboxPath::Bytes(p)).await.err(),
        ];
        for (i, e) in errs.iter().enumerate() {
            let e = e
                .as_ref()
                .unwrap_or_else(|| panic!("call {i} on {shown:?} succeeded"));
            assert_eq!(
                (e.status(), code(e)),
                (Some(400), ErrorCode::InvalidArgument),
                "call {i} on {shown:?}"
            );
        }
    }
    // 255 bytes is the longest name that works.
    c.upload(&id, &ok_name, "ok", &UploadOptions::default())
        .await
        .expect("255 bytes");
    assert_eq!(c.read_file(&id, &ok_name).await.expect("read"), b"ok");
    // Raw query values: `%00` and bytes that are not UTF-8 are refused, not altered.
    let s = cove_e2e::server();
    for query in ["path=%2Ftmp%2Fa%00b", "path=%2Ftmp%2F%FF"] {
        let resp = reqwest::Client::new()
            .get(format!(
                "{}/v1/sandboxes/{id}/files:stat?{query}",
                s.api_url
            ))
            .bearer_auth(&s.token)
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status().as_u16(), 400, "{query}");
        let body: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(body["code"], "invalid_argument", "{query}");
    }
    delete(&c, &id).await;
}
