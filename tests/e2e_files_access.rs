//! The file API acts with the requesting user's permissions (issue 12): `403 permission_denied`
//! where that user could not read or write, a replaced file keeps its owner and mode, root keeps
//! full access; Cove's own `/.cove` is hidden and refused by every file route without anything
//! being removed first; writes to pseudo-filesystems are `400 invalid_argument`.

use cove_api_types::{ErrorCode, FileType};
use cove_client::{ClientError, DownloadOptions, UploadOptions};
use cove_e2e::{client, delete, root_sh, sandbox, sh};
use futures::TryStreamExt;
use reqwest::Method;
use serde_json::{json, Value};

/// One raw file call: method, route, query, JSON body.
type Call = (
    Method,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Option<Value>,
);

fn code(e: &ClientError) -> Option<ErrorCode> {
    e.api_body().map(|b| b.code)
}

/// A raw file call: `(status, body)`; `user` goes in the query (GET/PUT/DELETE) or the body.
async fn call(
    id: &str,
    method: Method,
    route: &str,
    query: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let s = cove_e2e::server();
    let mut req = reqwest::Client::new()
        .request(method, format!("{}/v1/sandboxes/{id}/{route}", s.api_url))
        .query(query)
        .bearer_auth(&s.token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn download_as(id: &str, path: &str, user: &str) -> Result<Vec<u8>, ClientError> {
    let opts = DownloadOptions {
        user: Some(user.into()),
        ..Default::default()
    };
    client()
        .download(id, path, &opts)
        .await?
        .map_ok(|b| b.to_vec())
        .try_concat()
        .await
}

fn as_user(user: &str) -> UploadOptions {
    UploadOptions {
        user: Some(user.into()),
        mode: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_operations_have_the_users_permissions() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let before = root_sh(
        &c,
        &id,
        "sha256sum /etc/passwd; stat -c '%U %a' /etc/passwd",
    )
    .await
    .stdout_text();

    // Writing /etc/passwd as `user` is refused and changes nothing; no temporary file is left.
    let err = c
        .upload(
            &id,
            "/etc/passwd",
            "pwned::0:0::/:/bin/sh\n",
            &as_user("user"),
        )
        .await
        .expect_err("user may not write /etc/passwd");
    assert_eq!(code(&err), Some(ErrorCode::PermissionDenied), "{err}");
    assert_eq!(err.status(), Some(403));
    let after = root_sh(
        &c,
        &id,
        "sha256sum /etc/passwd; stat -c '%U %a' /etc/passwd; ls -a /etc | grep -c cove-upload",
    )
    .await
    .stdout_text();
    assert_eq!(after, format!("{before}0\n"));
    // Commands as `user` still work.
    assert_eq!(sh(&c, &id, "id -un").await.stdout_text(), "user\n");

    // A new file where `user` may not create one.
    let err = c
        .upload(&id, "/etc/cove-new", "x", &as_user("user"))
        .await
        .expect_err("user may not create in /etc");
    assert_eq!(code(&err), Some(ErrorCode::PermissionDenied));
    let err = c
        .make_dir(&id, "/etc/cove-dir", Some("user"))
        .await
        .expect_err("user may not mkdir in /etc");
    assert_eq!(code(&err), Some(ErrorCode::PermissionDenied));

    // Reading what `cat` as `user` cannot read.
    let err = download_as(&id, "/etc/shadow", "user")
        .await
        .expect_err("user may not read /etc/shadow");
    assert_eq!(code(&err), Some(ErrorCode::PermissionDenied), "{err}");
    assert_eq!(
        sh(&c, &id, "cat /etc/shadow >/dev/null 2>&1 || echo denied")
            .await
            .stdout_text(),
        "denied\n"
    );
    // Root keeps full access.
    let shadow = download_as(&id, "/etc/shadow", "root")
        .await
        .expect("root reads /etc/shadow");
    assert!(String::from_utf8_lossy(&shadow).starts_with("root:"));
    let info = c
        .upload(&id, "/etc/cove-root", "r", &as_user("root"))
        .await
        .expect("root writes /etc");
    assert_eq!(info.owner, "root");

    // stat, list, remove, move and watch below a directory `user` cannot enter.
    root_sh(
        &c,
        &id,
        "mkdir -m 700 /srv/priv && echo s > /srv/priv/f && echo ok",
    )
    .await;
    let user_q = [("path", "/srv/priv/f"), ("user", "user")];
    let (status, body) = call(&id, Method::GET, "files:stat", &user_q, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied"))
    );
    let list_q = [("path", "/srv/priv"), ("depth", "1"), ("user", "user")];
    let (status, body) = call(&id, Method::GET, "files:list", &list_q, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied"))
    );
    let (status, body) = call(&id, Method::DELETE, "files", &user_q, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied"))
    );
    let (status, body) = call(
        &id,
        Method::POST,
        "files:move",
        &[],
        Some(json!({"from": "/srv/priv/f", "to": "/tmp/stolen", "user": "user"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied"))
    );
    let watch_q = [("path", "/srv/priv"), ("user", "user")];
    let (status, body) = call(&id, Method::GET, "files:watch", &watch_q, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied"))
    );
    // Removing someone else's file from a directory `user` may not write.
    let (status, _) = call(
        &id,
        Method::DELETE,
        "files",
        &[("path", "/etc/hostname"), ("user", "user")],
        None,
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        root_sh(
            &c,
            &id,
            "cat /srv/priv/f; test -e /etc/hostname && echo intact"
        )
        .await
        .stdout_text(),
        "s\nintact\n"
    );
    // Root sees it all.
    let root_q = [("path", "/srv/priv"), ("depth", "1"), ("user", "root")];
    let (status, body) = call(&id, Method::GET, "files:list", &root_q, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entries"][0]["name"], "f");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_file_keeps_its_owner_and_mode() {
    let c = client();
    let id = sandbox(&c, "base").await;
    // A root-owned file anyone may write, in a directory of `user`'s; a setuid one beside it.
    let o = root_sh(
        &c,
        &id,
        "mkdir /srv/shared && chown user:user /srv/shared && echo old > /srv/shared/f && \
         chmod 666 /srv/shared/f && echo old > /srv/shared/s && chmod 4777 /srv/shared/s && \
         echo ok",
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n");
    let info = c
        .upload(&id, "/srv/shared/f", "new\n", &as_user("user"))
        .await
        .expect("user may write a world-writable file");
    assert_eq!(
        (info.owner.as_str(), info.group.as_str(), info.mode),
        ("root", "root", 0o666)
    );
    let info = c
        .upload(&id, "/srv/shared/s", "new\n", &as_user("user"))
        .await
        .expect("write");
    assert_eq!(
        (info.owner.as_str(), info.mode),
        ("root", 0o777),
        "no set-user-id root file written by user"
    );
    let o = sh(
        &c,
        &id,
        "cat /srv/shared/f; stat -c '%U:%G %a' /srv/shared/f",
    )
    .await;
    assert_eq!(o.stdout_text(), "new\nroot:root 666\n");
    // A new file in that directory is the user's.
    let info = c
        .upload(&id, "/srv/shared/mine", "m", &as_user("user"))
        .await
        .expect("create");
    assert_eq!(
        (info.owner.as_str(), info.group.as_str(), info.mode),
        ("user", "user", 0o644)
    );
    // A root file that is not writable for `user` stays as it was, even in user's directory.
    root_sh(
        &c,
        &id,
        "echo keep > /srv/shared/ro && chmod 644 /srv/shared/ro",
    )
    .await;
    let err = c
        .upload(&id, "/srv/shared/ro", "x", &as_user("user"))
        .await
        .expect_err("not writable");
    assert_eq!(code(&err), Some(ErrorCode::PermissionDenied));
    assert_eq!(
        sh(&c, &id, "cat /srv/shared/ro").await.stdout_text(),
        "keep\n"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cove_dir_is_hidden_and_refused_by_every_route() {
    let c = client();
    let id = sandbox(&c, "base").await;
    for user in ["root", "user"] {
        let (status, body) = call(
            &id,
            Method::GET,
            "files:list",
            &[("path", "/"), ("depth", "2"), ("user", user)],
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let entries = body["entries"].as_array().expect("entries");
        assert!(entries.iter().any(|e| e["name"] == "etc"));
        assert!(
            entries
                .iter()
                .all(|e| !e["path"].as_str().unwrap_or("").starts_with("/.cove")),
            "listed: {body}"
        );
    }
    sh(&c, &id, "ln -s /.cove /tmp/cove-link").await;
    let sock = "/.cove/run/agent.sock";
    let agent = "/.cove/bin/cove-guest-agent";
    let root = |p: &'static str| [("path", p), ("user", "root")];
    let refused: Vec<Call> = vec![
        (Method::DELETE, "files", root("/.cove").to_vec(), None),
        (Method::DELETE, "files", root(sock).to_vec(), None),
        (Method::DELETE, "files", root("/.cove/run").to_vec(), None),
        (Method::DELETE, "files", root(agent).to_vec(), None),
        (
            Method::DELETE,
            "files",
            root("/tmp/cove-link/run").to_vec(),
            None,
        ),
        (Method::GET, "files", root(agent).to_vec(), None),
        (
            Method::GET,
            "files",
            root("/tmp/cove-link/bin/cove-guest-agent").to_vec(),
            None,
        ),
        (Method::GET, "files:stat", root("/.cove").to_vec(), None),
        (Method::GET, "files:stat", root(sock).to_vec(), None),
        (
            Method::GET,
            "files:list",
            vec![("path", "/.cove"), ("depth", "1"), ("user", "root")],
            None,
        ),
        (
            Method::GET,
            "files:list",
            vec![("path", "/tmp/cove-link"), ("depth", "1"), ("user", "root")],
            None,
        ),
        (
            Method::GET,
            "files:watch",
            root("/.cove/run").to_vec(),
            None,
        ),
        (
            Method::POST,
            "files:mkdir",
            vec![],
            Some(json!({"path": "/.cove/x", "user": "root"})),
        ),
        (
            Method::POST,
            "files:move",
            vec![],
            Some(json!({"from": "/.cove/run", "to": "/tmp/run", "user": "root"})),
        ),
        (
            Method::POST,
            "files:move",
            vec![],
            Some(json!({"from": "/etc/hostname", "to": sock, "user": "root"})),
        ),
    ];
    for (method, route, query, body) in refused {
        let what = format!("{method} {route} {query:?} {body:?}");
        let (status, answer) = call(&id, method, route, &query, body).await;
        assert_eq!(status, 403, "{what}: {answer}");
        assert_eq!(answer["code"], "permission_denied", "{what}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap_or("")
                .contains("reserved"),
            "{what}: {answer}"
        );
    }
    for path in [sock, agent, "/tmp/cove-link/run/x"] {
        let err = c
            .upload(&id, path, "x", &as_user("root"))
            .await
            .expect_err("refused");
        assert_eq!(code(&err), Some(ErrorCode::PermissionDenied), "{path}");
    }
    // A watch of `/` does not report Cove's directory.
    let mut events = Box::pin(c.watch_files(&id, "/", false).await.expect("watch /"));
    root_sh(&c, &id, "touch /.cove; sleep 0.2; touch /cove-visible").await;
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while !seen.iter().any(|p: &String| p == "/cove-visible") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ev = tokio::time::timeout(left, futures::StreamExt::next(&mut events))
            .await
            .unwrap_or_else(|_| panic!("no event for /cove-visible; seen {seen:?}"))
            .expect("the watch goes on")
            .expect("event");
        seen.push(ev.path);
    }
    drop(events);
    assert!(
        seen.iter().all(|p| !p.starts_with("/.cove")),
        "watch reported {seen:?}"
    );
    // Nothing was removed or replaced: the agent still serves commands with their output, and
    // the link itself may go.
    let o = root_sh(
        &c,
        &id,
        "test -S /.cove/run/agent.sock && test -s /.cove/bin/cove-guest-agent && echo alive",
    )
    .await;
    assert_eq!(
        (o.stdout_text().as_str(), o.command.exit_code),
        ("alive\n", Some(0))
    );
    c.remove_file(&id, "/tmp/cove-link")
        .await
        .expect("remove the link only");
    assert_eq!(sh(&c, &id, "echo still").await.stdout_text(), "still\n");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_pseudo_filesystems_are_invalid_arguments() {
    let c = client();
    let id = sandbox(&c, "base").await;
    for (path, kind) in [
        ("/proc/sys/kernel/hostname", "proc"),
        ("/proc/cove-new", "proc"),
        ("/sys/kernel/cove", "sysfs"),
        ("/sys/fs/cgroup/cove", "sysfs"),
        ("/dev/cove-file", "devices"),
    ] {
        for user in ["root", "user"] {
            let err = c
                .upload(&id, path, "x", &as_user(user))
                .await
                .expect_err("pseudo");
            let body = err.api_body().expect("api error");
            assert_eq!(
                (err.status(), body.code),
                (Some(400), ErrorCode::InvalidArgument),
                "{path} as {user}: {err}"
            );
            assert!(
                body.message.contains("pseudo-filesystem"),
                "{path}: {}",
                body.message
            );
            assert!(
                body.message.contains(kind) || kind == "sysfs",
                "{}",
                body.message
            );
        }
    }
    let err = c
        .make_dir(&id, "/proc/cove-dir", Some("root"))
        .await
        .expect_err("pseudo");
    assert_eq!(code(&err), Some(ErrorCode::InvalidArgument));
    // /dev/shm is an ordinary tmpfs; reading /proc works as before.
    let info = c
        .upload(&id, "/dev/shm/cove-ok", "ok", &as_user("root"))
        .await
        .expect("tmpfs");
    assert_eq!(info.file_type, FileType::File);
    let hostname = download_as(&id, "/proc/sys/kernel/hostname", "user")
        .await
        .expect("read /proc");
    assert!(!hostname.is_empty());
    delete(&c, &id).await;
}
