//! Templates from a file on a real node: a file using every instruction builds FROM the cached
//! `tiny` and its sandboxes see its ENV, WORKDIR, USER, files and START/READY server; a second
//! build is a cache hit; changing the last step reruns only it; a failing RUN leaves no
//! release and logs its stderr; bad files are 400 naming the line; a release in use is 409.
//! Words expand against the parent's environment (`ENV PATH=/opt/tool/bin:$PATH`), with
//! `--build-arg`s, `LABEL` and `EXPOSE` recorded.

use std::time::{Duration, Instant};

use cove_api_types::{
    CreateCommandRequest, CreateSandboxRequest, CreateTemplateQuery, OperationLogEvent,
    OperationState,
};
use cove_client::{Client, ClientError};
use cove_e2e::{client, create_running, delete, ensure_template, oci_import_dir, server, sh};
use futures::StreamExt;

/// A context tar of `(path, content)` files.
fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, path, content.as_bytes())
            .expect("append");
    }
    b.into_inner().expect("tar")
}

/// The log lines of operation `op_id`, until it is done.
async fn op_log(c: &Client, op_id: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut logs = std::pin::pin!(c.operation_logs(op_id, None));
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), logs.next())
        .await
        .expect("log stream answers")
    {
        match ev.expect("log event") {
            OperationLogEvent::Log { line, .. } => lines.push(line),
            OperationLogEvent::Done { .. } => break,
            OperationLogEvent::Progress { .. } => {}
        }
    }
    lines
}

/// Builds `file` as template `name` and waits; the final state, the build log and its time.
async fn build(
    c: &Client,
    name: &str,
    file: &str,
    extra: &[(&str, &str)],
) -> (OperationState, Vec<String>, Duration) {
    build_with_args(c, name, file, extra, &[]).await
}

const APP_FILE: &str = "\
FROM tiny
ARG GREETING=hello
ENV APP_MODE=test GREETING_COPY=${GREETING}
COPY app /srv/app/
ADD notes.txt /srv/
COPY gone.txt /srv/
RUN mkdir -p /srv/www && echo \"$GREETING from run\" > /srv/www/index.html && rm /srv/gone.txt && chown -R user /srv
WORKDIR /srv/app
USER user
START httpd -f -p 8080 -h /srv/www
READY --timeout=20 wget -q -O /dev/null http://127.0.0.1:8080/
RUN id -un > /srv/app/who && pwd >> /srv/app/who
";

const APP_CONTEXT: &[(&str, &str)] = &[
    ("app/hello.txt", "hello file\n"),
    ("notes.txt", "notes\n"),
    ("gone.txt", "soon gone\n"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_template_builds_caches_runs_and_deletes() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let (state, log, fresh) = build(&c, "web", APP_FILE, APP_CONTEXT).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let t = c.template("web").await.expect("template");
    assert_eq!(t.latest_release, Some(1));
    assert_eq!(
        (t.defaults.user.as_str(), t.defaults.workdir.as_str()),
        ("user", "/srv/app")
    );
    let r1 = &t.releases[0];
    assert!(
        r1.size_bytes.unwrap_or(0) > 0 && r1.digest.is_some(),
        "{r1:?}"
    );

    let id = create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("web".into()),
            ..Default::default()
        },
    )
    .await;
    let out = sh(
        &c,
        &id,
        "echo $APP_MODE $GREETING_COPY; id -un; pwd; cat hello.txt /srv/notes.txt who; \
         test -e /srv/gone.txt && echo gone-is-there; wget -q -O- http://127.0.0.1:8080/",
    )
    .await;
    assert_eq!(
        out.stdout_text(),
        "test hello\nuser\n/srv/app\nhello file\nnotes\nuser\n/srv/app\nhello from run\n",
        "stderr: {}",
        out.stderr_text()
    );

    // In use: 409; the template as a whole too.
    let err = c.delete_release("web", 1).await.expect_err("in use");
    assert!(matches!(err, ClientError::Api { status: 409, .. }), "{err}");
    let err = c.delete_template("web").await.expect_err("in use");
    assert!(matches!(err, ClientError::Api { status: 409, .. }), "{err}");

    // The same file and context again: every step from the cache.
    let (state, log, cached) = build(&c, "web", APP_FILE, APP_CONTEXT).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let ran: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("line ") && !l.ends_with("(cached)"))
        .collect();
    assert!(ran.is_empty(), "steps ran again: {ran:?}");
    eprintln!("fresh build {fresh:?}, cache hit {cached:?}");

    // no_cache reruns every step (beside the cached trees, which stay in use).
    let mut files = vec![("Dockerfile", APP_FILE)];
    files.extend_from_slice(APP_CONTEXT);
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "web".into(),
                no_cache: true,
                ..Default::default()
            },
            context(&files),
        )
        .await
        .expect("no_cache build");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(600))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);

    // Change the last step only: only it runs.
    let changed = APP_FILE.replace("id -un > /srv/app/who", "id -un > /srv/app/who2");
    let (state, log, _) = build(&c, "web", &changed, APP_CONTEXT).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let ran: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("line ") && !l.ends_with("(cached)"))
        .collect();
    assert_eq!(ran.len(), 1, "{log:#?}");
    assert!(ran[0].starts_with("line 12: RUN"), "{ran:?}");
    let latest = c.template("web").await.expect("template").latest_release;
    assert_eq!(latest, Some(4));

    delete(&c, &id).await;
    c.delete_release("web", 1).await.expect("delete release 1");
    let t = c.template("web").await.expect("template");
    assert!(t.releases.iter().all(|r| r.number != 1), "{:?}", t.releases);
    let err = c.delete_release("web", 1).await.expect_err("gone");
    assert!(matches!(err, ClientError::Api { status: 404, .. }), "{err}");
    c.delete_template("web").await.expect("delete template");
    let err = c.template("web").await.expect_err("gone");
    assert!(matches!(err, ClientError::Api { status: 404, .. }), "{err}");
    // Numbers are never reused: a new template of that name continues at 5.
    let (state, log, _) = build(&c, "web", "FROM tiny\nENV A=1\n", &[]).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    assert_eq!(
        c.template("web").await.expect("template").latest_release,
        Some(5)
    );
    c.delete_template("web").await.expect("delete template");
}

/// Issue 32, item 1: `ENV PATH=/opt/tool/bin:$PATH` keeps the parent's `PATH`, so the next
/// `RUN` finds `mkdir` and `ls` by name and the sandboxes' `PATH` is the tool dir, then the
/// parent's. A `--build-arg` replaces an `ARG`'s default; `LABEL`/`EXPOSE` are recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_expands_against_the_parent_environment() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let parent_path = c
        .template("tiny")
        .await
        .expect("tiny")
        .defaults
        .env
        .get("PATH")
        .cloned()
        // A parent without PATH gets the default one, as with Docker's BuildKit.
        .unwrap_or_else(|| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()
        });
    let file = "\
FROM tiny
ARG TOOL=/nowhere
ENV PATH=$TOOL/bin:$PATH TOOL_HOME=${TOOL_HOME:-$TOOL}
LABEL org.opencontainers.image.title=\"path test\"
EXPOSE 8000 53/udp
RUN mkdir -p /opt/tool/bin && ls / && printf '#!/bin/sh\\necho tool ran\\n' > /opt/tool/bin/mytool && chmod +x /opt/tool/bin/mytool
";
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "pathy".into(),
                build_args: [("TOOL".to_string(), "/opt/tool".to_string())].into(),
                ..Default::default()
            },
            context(&[("Dockerfile", file)]),
        )
        .await
        .expect("create template");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(600))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let t = c.template("pathy").await.expect("template");
    let want = format!("/opt/tool/bin:{parent_path}");
    assert_eq!(t.defaults.env.get("PATH"), Some(&want));
    assert_eq!(
        t.defaults.env.get("TOOL_HOME").map(String::as_str),
        Some("/opt/tool")
    );
    assert_eq!(
        t.defaults
            .labels
            .get("org.opencontainers.image.title")
            .map(String::as_str),
        Some("path test")
    );
    assert_eq!(t.defaults.ports, [8000]);

    let id = cove_e2e::create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("pathy".into()),
            ..Default::default()
        },
    )
    .await;
    let out = cove_e2e::run(
        &c,
        &id,
        CreateCommandRequest {
            argv: Some(vec![
                "sh".into(),
                "-c".into(),
                "echo $PATH; mytool; ls -d /opt".into(),
            ]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        out.stdout_text(),
        format!("{want}\ntool ran\n/opt\n"),
        "stderr: {}",
        out.stderr_text()
    );
    delete(&c, &id).await;
    c.delete_template("pathy").await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_leaves_no_release_and_logs_its_stderr() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let file = "FROM tiny\nRUN echo made > /tmp/x\nRUN echo this-went-wrong >&2; exit 3\n";
    let (state, log, _) = build(&c, "broken", file, &[]).await;
    assert_eq!(state, OperationState::Failed);
    assert!(
        log.iter().any(|l| l == "stderr: this-went-wrong"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("line 3") && l.contains("code 3")),
        "{log:#?}"
    );
    // A failed first build leaves no template: the name is free again (names are shared by
    // every org), and nothing of the release stays on disk.
    let gone = c.template("broken").await.expect_err("no template");
    assert_eq!(
        gone.api_body().map(|b| b.code),
        Some(cove_api_types::ErrorCode::TemplateNotFound)
    );
    let s = cove_e2e::server();
    assert!(!s.data_dir.join("releases/broken/1").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_400_naming_the_line() {
    let c = client();
    for (file, extra, line) in [
        ("FROM tiny\nRUN true\nVOLUME /data\n", vec![], "line 3"),
        ("FROM tiny\nRUN true\nENV A=${B\n", vec![], "line 3"),
        ("FROM tiny\n\nCOPY ../secret /x\n", vec![], "line 3"),
        ("RUN true\n", vec![], "line 1"),
        (
            "FROM tiny\nCOPY missing.txt /x\n",
            vec![("other", "x")],
            "line 2",
        ),
    ] {
        let mut files = vec![("Dockerfile", file)];
        files.extend(extra);
        let res = c
            .create_template(
                &CreateTemplateQuery {
                    name: "bad".into(),
                    ..Default::default()
                },
                context(&files),
            )
            .await;
        match res {
            Err(ClientError::Api { status: 400, body }) => {
                assert!(body.message.contains(line), "{file}: {}", body.message);
                assert!(!body.request_id.is_empty());
            }
            other => panic!("{file}: {other:?}"),
        }
    }
    let _ = c.delete_template("bad").await;
    let err = c.delete_template("tiny").await.expect_err("built-in");
    assert!(matches!(err, ClientError::Api { status: 409, .. }), "{err}");
}

/// A tar of `(path, kind, data)` entries: `f` file, `d` directory, `l` symlink to `data`.
fn layer(entries: &[(&str, char, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data) in entries {
        let mut h = tar::Header::new_gnu();
        match kind {
            'd' => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                h.set_cksum();
                b.append_data(&mut h, path, &[][..]).expect("dir");
            }
            'l' => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                let target = String::from_utf8_lossy(data).into_owned();
                b.append_link(&mut h, path, target).expect("symlink");
            }
            _ => {
                h.set_mode(0o755);
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append_data(&mut h, path, *data).expect("file");
            }
        }
    }
    b.into_inner().expect("tar")
}

/// An OCI image layout tarball: busybox and accounts in layer 1, a whiteout in layer 2.
fn oci_archive() -> Vec<u8> {
    use sha2::Digest as _;
    let busybox = std::fs::read("/bin/busybox").expect("the host's static busybox");
    let mut l1: Vec<(&str, char, &[u8])> = vec![
        ("bin", 'd', b""),
        ("bin/busybox", 'f', &busybox),
        ("etc", 'd', b""),
        (
            "etc/passwd",
            'f',
            b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
        ),
        ("etc/group", 'f', b"root:x:0:\nuser:x:1000:\n"),
        ("etc/old", 'f', b"old\n"),
        ("tmp", 'd', b""),
        ("root", 'd', b""),
        ("home", 'd', b""),
        ("work", 'd', b""),
    ];
    for applet in ["sh", "cat", "ls", "id", "pwd", "echo", "test", "chown"] {
        l1.push((
            Box::leak(format!("bin/{applet}").into_boxed_str()),
            'l',
            b"busybox",
        ));
    }
    let l1 = layer(&l1);
    let l2 = layer(&[("etc/.wh.old", 'f', b""), ("etc/new", 'f', b"new\n")]);
    let hex = |b: &[u8]| format!("{:x}", sha2::Sha256::digest(b));
    let config = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","IMG=oci"],"WorkingDir":"/work","User":"root"},"rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
    let desc = |media: &str, b: &[u8]| {
        format!(
            r#"{{"mediaType":"{media}","digest":"sha256:{}","size":{}}}"#,
            hex(b),
            b.len()
        )
    };
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[{},{}]}}"#,
        desc("application/vnd.oci.image.config.v1+json", &config),
        desc("application/vnd.oci.image.layer.v1.tar", &l1),
        desc("application/vnd.oci.image.layer.v1.tar", &l2),
    )
    .into_bytes();
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{}]}}"#,
        desc("application/vnd.oci.image.manifest.v1+json", &manifest)
    )
    .into_bytes();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", hex(b));
    let (p1, p2, pc, pm) = (blob(&l1), blob(&l2), blob(&config), blob(&manifest));
    layer(&[
        ("oci-layout", 'f', br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("index.json", 'f', &index),
        (&pm, 'f', &manifest),
        (&pc, 'f', &config),
        (&p1, 'f', &l1),
        (&p2, 'f', &l2),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_archive_imports_with_whiteouts_and_image_defaults() {
    let c = client();
    std::fs::write(oci_import_dir().join("image.tar"), oci_archive()).expect("write archive");
    let file = "FROM oci-archive:image.tar\nENV PATH=/opt/x:$PATH IMG2=${IMG}-2\nRUN echo built > /work/built\n";
    let (state, log, _) = build(&c, "imported", file, &[]).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let t = c.template("imported").await.expect("template");
    assert_eq!(
        (t.defaults.user.as_str(), t.defaults.workdir.as_str()),
        ("root", "/work")
    );
    let id = create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("imported".into()),
            ..Default::default()
        },
    )
    .await;
    let out = sh(
        &c,
        &id,
        "echo $IMG $IMG2 $PATH; pwd; id -un; cat /etc/new built; test -e /etc/old && echo old-is-there",
    )
    .await;
    assert_eq!(
        out.stdout_text(),
        "oci oci-2 /opt/x:/bin\n/work\nroot\nnew\nbuilt\n",
        "stderr: {}",
        out.stderr_text()
    );
    delete(&c, &id).await;
    c.delete_template("imported").await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_archive_with_a_corrupted_layer_fails_naming_the_layer() {
    let c = client();
    let path = oci_import_dir().join("corrupted.tar");
    let mut archive = oci_archive();
    // The content of layer 2's `etc/new`: changed in place, so the archive still reads.
    let at = archive
        .windows(4)
        .position(|w| w == b"new\n")
        .expect("etc/new in the archive");
    archive[at] = b'N';
    std::fs::write(&path, archive).expect("write archive");
    let file = "FROM oci-archive:corrupted.tar\n";
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "corrupted".into(),
                ..Default::default()
            },
            context(&[("Dockerfile", file)]),
        )
        .await
        .expect("accepted");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Failed);
    let err = op.error.expect("error");
    assert_eq!(
        err.code,
        cove_api_types::ErrorCode::InvalidArgument,
        "{}",
        err.message
    );
    assert!(
        err.message.contains("blobs/sha256/") && err.message.contains("manifest says"),
        "{}",
        err.message
    );
    // A failed first build leaves no template.
    let gone = c.template("corrupted").await.expect_err("no template");
    assert_eq!(
        gone.api_body().map(|b| b.code),
        Some(cove_api_types::ErrorCode::TemplateNotFound)
    );
}

/// The client of a fresh org's API key (a tenant, not the admin).
async fn tenant(name: &str) -> Client {
    let admin = client();
    let org = format!("{name}-{:08x}", rand::random::<u32>());
    admin
        .create_org(&org, cove_api_types::Quotas::default())
        .await
        .expect("org");
    let key = admin.create_api_key(&org, "e2e").await.expect("key");
    Client::new(&server().api_url, key.secret).expect("client")
}

/// Starts building `file` as template `name` with `c`; the failed build's error.
async fn failed_build(c: &Client, name: &str, file: &str) -> cove_api_types::OperationError {
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: name.into(),
                ..Default::default()
            },
            context(&[("Dockerfile", file)]),
        )
        .await
        .expect("accepted");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(60))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Failed, "{file}");
    let _ = c.delete_template(name).await;
    op.error.expect("error")
}

/// Issue 26: `FROM oci-archive:` never opens a host path a tenant names. An absolute path is
/// refused at once; a name in the import directory that is a link to a host file, a FIFO, a
/// device link or missing fails with one message that quotes no byte of any file, and
/// nothing blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oci_archive_never_opens_a_host_path_a_tenant_names() {
    let c = tenant("oci").await;
    let secret = b"root:$6$E2ESECRETHASH:19000:0:99999:7:::\n";
    let host = tempfile::tempdir().expect("tmp");
    let canary = host.path().join("shadow");
    std::fs::write(&canary, secret.repeat(20)).expect("canary");
    for path in ["/etc/shadow", "/dev/zero", "/proc/self/environ"] {
        let file = format!("FROM oci-archive:{path}\n");
        let err = c
            .create_template(
                &CreateTemplateQuery {
                    name: "host-path".into(),
                    ..Default::default()
                },
                context(&[("Dockerfile", file.as_str())]),
            )
            .await
            .expect_err("refused");
        match err {
            ClientError::Api { status: 400, body } => {
                assert_eq!(body.code, cove_api_types::ErrorCode::InvalidArgument);
                assert!(
                    body.message.contains("OCI import directory"),
                    "{}",
                    body.message
                );
                assert!(!body.message.contains("root:"), "{}", body.message);
            }
            other => panic!("{path}: {other:?}"),
        }
    }

    let dir = oci_import_dir();
    std::os::unix::fs::symlink(&canary, dir.join("shadow-link.tar")).expect("symlink");
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.tar")).expect("symlink");
    std::os::unix::fs::symlink(host.path(), dir.join("hostdir")).expect("symlink");
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.tar"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let mut messages = Vec::new();
    let began = Instant::now();
    for name in [
        "missing.tar",
        "shadow-link.tar",
        "zero.tar",
        "hostdir/shadow",
        "fifo.tar",
    ] {
        let err = failed_build(&c, "via-import-dir", &format!("FROM oci-archive:{name}\n")).await;
        assert_eq!(
            err.code,
            cove_api_types::ErrorCode::InvalidArgument,
            "{name}: {}",
            err.message
        );
        assert!(
            !err.message.contains("E2ESECRETHASH"),
            "{name}: {}",
            err.message
        );
        messages.push(err.message.replace(name, "NAME"));
    }
    assert!(began.elapsed() < Duration::from_secs(60), "nothing blocked");
    messages.dedup();
    assert_eq!(messages.len(), 1, "no existence oracle: {messages:#?}");

    // A file that is not an image: a fixed message, never its bytes.
    std::fs::write(dir.join("not-an-image.tar"), secret.repeat(20)).expect("write");
    let err = failed_build(&c, "not-an-image", "FROM oci-archive:not-an-image.tar\n").await;
    assert!(!err.message.contains("E2ESECRETHASH"), "{}", err.message);
    assert_eq!(std::fs::read(&canary).expect("canary"), secret.repeat(20));
}

// A corpus of Dockerfiles shaped as well-known projects write them, built end to end FROM the
// cached `base` (and `tiny`) with nothing fetched from the internet: their packages come from
// the context (a wheel built in a stage, a vendored dependency tree) instead of a registry.

/// A Python service (the shape of a Flask/FastAPI project's Dockerfile): a wheel-building
/// stage, a venv first on `PATH`, `pip install -r requirements.txt` from local wheels, the
/// code copied `--chown` as a non-root user, `.dockerignore` keeping caches and `.git` out,
/// `EXPOSE` and an exec-form `CMD`.
const PYTHON_FILE: &str = r#"# syntax=docker/dockerfile:1
FROM base AS wheels
WORKDIR /build
COPY pkg/ ./
RUN python3 -m zipfile -c /build/greet-1.0-py3-none-any.whl greet greet-1.0.dist-info

FROM base
LABEL org.opencontainers.image.source="https://example.com/app"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv
RUN python3 -m venv $VIRTUAL_ENV
ENV PATH="$VIRTUAL_ENV/bin:$PATH"
WORKDIR /app
COPY requirements.txt .
COPY --from=wheels /build/greet-1.0-py3-none-any.whl /wheels/
RUN pip install --no-cache-dir --no-index --find-links=/wheels -r requirements.txt
COPY --chown=user:user . .
USER user
EXPOSE 8000
CMD ["python", "app.py", "--port", "8000"]
READY --timeout=30 python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/')"
"#;

const PYTHON_CONTEXT: &[(&str, &str)] = &[
    (".dockerignore", "**/__pycache__\n*.pyc\n.git\nDockerfile\n"),
    ("requirements.txt", "greet==1.0\n"),
    (
        "app.py",
        "import http.server, sys, greet\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       self.send_response(200); self.end_headers(); self.wfile.write(greet.hello().encode())\n\
         http.server.HTTPServer(('127.0.0.1', int(sys.argv[2])), H).serve_forever()\n",
    ),
    ("__pycache__/app.cpython-311.pyc", "stale"),
    ("lib/__pycache__/x.pyc", "stale"),
    ("lib/util.py", "X = 1\n"),
    (".git/HEAD", "ref: refs/heads/main\n"),
    ("pkg/greet/__init__.py", "def hello():\n    return 'hello from greet'\n"),
    (
        "pkg/greet-1.0.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: greet\nVersion: 1.0\n",
    ),
    (
        "pkg/greet-1.0.dist-info/WHEEL",
        "Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    ),
    (
        "pkg/greet-1.0.dist-info/RECORD",
        "greet/__init__.py,,\ngreet-1.0.dist-info/METADATA,,\n\
         greet-1.0.dist-info/WHEEL,,\ngreet-1.0.dist-info/RECORD,,\n",
    ),
];

/// A Node service (the shape of the Node.js docker guide's Dockerfile): `package*.json`
/// first, an `npm ci`-like install from the lock file (here a vendored tree, no registry),
/// the rest copied over a `.dockerignore`d local `node_modules`, an entrypoint script copied
/// `--chmod`, and `ENTRYPOINT` + `CMD` combined as Docker combines them.
const NODE_FILE: &str = r#"FROM base
ENV NODE_ENV=production
WORKDIR /usr/src/app
COPY package*.json ./
COPY vendor/ /tmp/vendor/
RUN set -eu; mkdir node_modules; \
    for dep in $(sed -n 's/.*"node_modules\/\([a-z-]*\)".*/\1/p' package-lock.json); do \
      cp -r /tmp/vendor/$dep node_modules/$dep; \
    done; rm -rf /tmp/vendor
COPY --chown=user . .
COPY --chmod=0755 docker-entrypoint.sh /usr/local/bin/
USER user
EXPOSE 3000
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["serve", "3000"]
READY --timeout=30 curl -sf http://127.0.0.1:3000/
"#;

const NODE_CONTEXT: &[(&str, &str)] = &[
    (".dockerignore", "node_modules\nnpm-debug.log\n"),
    ("package.json", "{\"name\": \"app\", \"dependencies\": {\"left-pad\": \"1\"}}\n"),
    (
        "package-lock.json",
        "{\"packages\": {\"node_modules/left-pad\": {\"version\": \"1.3.0\"}}}\n",
    ),
    ("vendor/left-pad/index.js", "module.exports = 'left-pad 1.3.0';\n"),
    ("vendor/unused/index.js", "not in the lock file\n"),
    ("node_modules/left-pad/index.js", "a developer's local copy\n"),
    ("npm-debug.log", "noise\n"),
    ("server.js", "// the app\n"),
    (
        "docker-entrypoint.sh",
        "#!/bin/sh\nset -e\nif [ \"$1\" = serve ]; then\n  mkdir -p /tmp/www\n  \
         cat node_modules/left-pad/index.js > /tmp/www/index.html\n  \
         exec python3 -m http.server \"$2\" --bind 127.0.0.1 --directory /tmp/www\nfi\nexec \"$@\"\n",
    ),
];

/// A compiled service (the shape of a Go or C project's Dockerfile): a build stage that
/// compiles with a `--build-arg` version, a test stage `FROM` the build stage, and a final
/// stage on the smallest template that copies the one binary and runs it as `ENTRYPOINT`.
const BUILD_FILE: &str = r#"ARG VERSION=dev
FROM base AS build
ARG VERSION
WORKDIR /src
COPY . .
RUN mkdir -p /out && sed "s/@VERSION@/${VERSION}/" main.sh.in > /out/app && chmod 0755 /out/app

FROM build AS test
RUN /out/app --version | grep -q "^app "

FROM tiny
COPY --from=build /out/app /usr/local/bin/app
ENTRYPOINT ["/usr/local/bin/app"]
"#;

const BUILD_CONTEXT: &[(&str, &str)] = &[
    (
        "main.sh.in",
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo \"app @VERSION@\"; exit 0; fi\n\
         echo \"app @VERSION@ serving\" > /tmp/app.out\nexec sleep 3600\n",
    ),
    ("README.md", "# app\n"),
];

/// Builds `file` as template `name` with `extra` context files and `build_args`, and
/// waits; the final state, the build log and its time.
async fn build_with_args(
    c: &Client,
    name: &str,
    file: &str,
    extra: &[(&str, &str)],
    build_args: &[(&str, &str)],
) -> (OperationState, Vec<String>, Duration) {
    let mut files = vec![("Dockerfile", file)];
    files.extend_from_slice(extra);
    let t0 = Instant::now();
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: name.into(),
                build_args: build_args
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            },
            context(&files),
        )
        .await
        .expect("create template");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(600))
        .await
        .expect("build ends");
    let lines = op_log(c, &resp.operation.id).await;
    let took = t0.elapsed();
    eprintln!("build of {name}: {:?} in {took:?}", op.state);
    (op.state, lines, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corpus_of_real_world_dockerfiles_builds_and_runs() {
    let c = client();
    ensure_template(&c, "base").await;
    ensure_template(&c, "tiny").await;

    // Python: venv, pip from local wheels, --chown, .dockerignore, CMD as the start command.
    let (state, log, _) = build(&c, "corpus-python", PYTHON_FILE, PYTHON_CONTEXT).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let t = c.template("corpus-python").await.expect("template");
    assert_eq!(t.defaults.ports, [8000]);
    assert_eq!(
        t.defaults.start.as_deref(),
        Some("exec 'python' 'app.py' '--port' '8000'")
    );
    let id = cove_e2e::create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("corpus-python".into()),
            ..Default::default()
        },
    )
    .await;
    // EXPOSE is what port previews offer.
    let ports = c.sandbox_ports(&id).await.expect("ports");
    assert_eq!(ports.exposed, [8000]);
    let out = sh(
        &c,
        &id,
        "command -v python pip; python -c 'import greet; print(greet.hello())'; \
         curl -s http://127.0.0.1:8000/; echo; ls -A /app | tr '\\n' ' '; echo; \
         stat -c '%U %G' /app/app.py /app/lib/util.py; test -e /wheels/greet-1.0-py3-none-any.whl && echo wheel",
    )
    .await;
    assert_eq!(
        out.stdout_text(),
        "/opt/venv/bin/python\n/opt/venv/bin/pip\nhello from greet\nhello from greet\n\
         .dockerignore app.py lib pkg requirements.txt \nuser user\nuser user\nwheel\n",
        "stderr: {}",
        out.stderr_text()
    );
    delete(&c, &id).await;

    // Node: package*.json, an npm-ci-like install, ENTRYPOINT + CMD, --chmod.
    let (state, log, _) = build(&c, "corpus-node", NODE_FILE, NODE_CONTEXT).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let id = cove_e2e::create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("corpus-node".into()),
            ..Default::default()
        },
    )
    .await;
    let out = sh(
        &c,
        &id,
        "pwd; echo $NODE_ENV; curl -s http://127.0.0.1:3000/; ls node_modules; \
         test -e npm-debug.log || echo no-log; stat -c '%a %U' /usr/local/bin/docker-entrypoint.sh; \
         stat -c '%U' server.js node_modules/left-pad/index.js",
    )
    .await;
    assert_eq!(
        out.stdout_text(),
        "/usr/src/app\nproduction\nmodule.exports = 'left-pad 1.3.0';\nleft-pad\nno-log\n\
         755 root\nuser\nroot\n",
        "stderr: {}",
        out.stderr_text()
    );
    delete(&c, &id).await;

    // Compiled: a build stage with a --build-arg, a test stage FROM it, one binary copied
    // into `tiny`, ENTRYPOINT as the start command.
    let (state, log, _) = build_with_args(
        &c,
        "corpus-build",
        BUILD_FILE,
        BUILD_CONTEXT,
        &[("VERSION", "1.2.3")],
    )
    .await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    assert!(
        log.iter().any(|l| l == "stage build") && log.iter().any(|l| l == "stage test"),
        "{log:#?}"
    );
    let id = cove_e2e::create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("corpus-build".into()),
            ..Default::default()
        },
    )
    .await;
    let mut out = String::new();
    for _ in 0..50 {
        out = sh(
            &c,
            &id,
            "cat /tmp/app.out 2>/dev/null; app --version; ls /src 2>&1 | head -1",
        )
        .await
        .stdout_text();
        if out.starts_with("app 1.2.3 serving") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        out.starts_with("app 1.2.3 serving\napp 1.2.3\n") && out.contains("No such file"),
        "{out}"
    );
    delete(&c, &id).await;

    // A test stage that fails fails the build, naming its line.
    let failing = BUILD_FILE.replace("grep -q \"^app \"", "grep -q \"^nope \"");
    let (state, log, _) = build(&c, "corpus-build", &failing, BUILD_CONTEXT).await;
    assert_eq!(state, OperationState::Failed, "{log:#?}");
    assert!(log.iter().any(|l| l.contains("line 9")), "{log:#?}");
    for t in ["corpus-python", "corpus-node", "corpus-build"] {
        c.delete_template(t).await.expect("delete template");
    }
}

/// A sandbox whose `READY` never passes fails with what its `START` and last `READY` attempt
/// printed in the create operation's log, and a one-line summary of both in its reason (what
/// the `failed` event carries). It stays on its node until deleted: its files can be read and
/// commands (`ps`) run in it; the delete removes its container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ready_leaves_its_output_in_the_log_and_the_reason() {
    let c = client();
    ensure_template(&c, "tiny").await;
    let file = "FROM tiny\n\
                START echo start-says-hello; echo start-is-broken >&2; echo left > /tmp/start-ran; exit 3\n\
                READY --timeout=3 echo not-ready-yet; echo port 8080 refused >&2; exit 7\n";
    let (state, log, _) = build(&c, "failing-ready", file, &[]).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    let resp = c
        .create_sandbox(
            &CreateSandboxRequest {
                template: Some("failing-ready".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect("create");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create ends");
    assert_eq!(op.state, OperationState::Failed);
    let message = op.error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("READY did not pass within 3 s")
            && message.contains("last attempt exited with code 7: port 8080 refused")
            && message.contains("START exited with code 3: start-is-broken"),
        "{message}"
    );
    let s = c.get_sandbox(&resp.sandbox.id).await.expect("sandbox");
    let reason = s.state_reason.unwrap_or_default();
    assert!(
        reason.contains("port 8080 refused") && reason.contains("start-is-broken"),
        "{reason}"
    );
    let lines = op_log(&c, &resp.operation.id).await;
    for want in [
        "READY `echo not-ready-yet; echo port 8080 refused >&2; exit 7` exited with code 7",
        "READY | not-ready-yet",
        "READY | port 8080 refused",
        "START `echo start-says-hello; echo start-is-broken >&2; echo left > /tmp/start-ran; exit 3` exited with code 3",
        "START | start-says-hello",
        "START | start-is-broken",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want}: {lines:#?}");
    }
    // Inspectable until deleted: the file START wrote, a command, the list of commands.
    let id = &resp.sandbox.id;
    assert!(
        reason.contains("kept for inspection until deleted"),
        "{reason}"
    );
    let left = c
        .read_file(id, "/tmp/start-ran")
        .await
        .expect("read a file");
    assert_eq!(left, b"left\n");
    let ps = sh(&c, id, "ps -o pid,comm").await;
    assert_eq!(ps.command.exit_code, Some(0), "{}", ps.stderr_text());
    assert!(ps.stdout_text().contains("PID"), "{}", ps.stdout_text());
    // `cove ps -a`: START is among the sandbox's commands, ended with its code.
    let listed = c.list_commands(id).await.expect("list commands").commands;
    assert!(
        listed
            .iter()
            .any(|cmd| cmd.argv.join(" ").contains("start-says-hello") && cmd.exit_code == Some(3)),
        "{listed:#?}"
    );
    let data_dir = &server().data_dir;
    assert!(
        cove_e2e::runc_containers(data_dir).contains(id.as_str())
            || cove_e2e::runsc_containers(data_dir).contains(id.as_str()),
        "the failed sandbox's container stays until the delete"
    );
    delete(&c, id).await;
    assert!(!cove_e2e::runc_containers(data_dir).contains(id.as_str()));
    let gone = c
        .read_file(id, "/tmp/start-ran")
        .await
        .expect_err("deleted");
    assert!(
        matches!(gone, ClientError::Api { status: 404, .. }),
        "{gone:?}"
    );
    c.delete_template("failing-ready").await.expect("delete");
}
