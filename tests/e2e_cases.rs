//! Cases from ../shared/cases (C01, C02, C03, C05, C07, C08, C09) against the `base` template,
//! with their stated right values.

use std::time::{Duration, Instant};

use cove_api_types::{
    CommandState, CreateCommandRequest, CreateSandboxRequest, ErrorCode, OutputEvent,
};
use cove_client::{Client, UploadOptions};
use cove_e2e::{client, collect, delete, run, sandbox, sandbox_with, sh, shell, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c01_last_line_without_newline_is_kept_and_not_held_back() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let o = sh(&c, &id, "printf 'no-newline'").await;
    assert_eq!(o.stdout, b"no-newline");
    assert_eq!(o.command.exit_code, Some(0));
    let o = sh(&c, &id, "printf 'a\\nb\\nlast'").await;
    assert_eq!(o.stdout, b"a\nb\nlast");
    let o = sh(&c, &id, "printf 'partial-err' >&2").await;
    assert_eq!(
        (o.stdout.as_slice(), o.stderr.as_slice()),
        (&b""[..], &b"partial-err"[..])
    );

    let o = sh(&c, &id, "printf 'x'; sleep 1; printf 'y'").await;
    assert_eq!(o.stdout, b"xy");
    let (x_at, src, x) = o.chunks.first().cloned().expect("chunk");
    assert_eq!((src, &x[..]), (Source::Stdout, &b"x"[..]));
    assert!(
        x_at + Duration::from_millis(500) < o.elapsed,
        "x at {x_at:?}, exit at {:?}",
        o.elapsed
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c02_exit_codes_follow_shell_conventions() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let o = sh(&c, &id, "no-such-cmd-9f3a").await;
    assert_eq!(o.command.exit_code, Some(127));
    assert!(o.stderr_text().contains("not found"), "{}", o.stderr_text());
    assert!(o.stdout.is_empty());
    assert_eq!(sh(&c, &id, "false").await.command.exit_code, Some(1));
    assert_eq!(
        sh(&c, &id, "sh -c 'exit 42'").await.command.exit_code,
        Some(42)
    );
    let o = sh(
        &c,
        &id,
        "printf '#!/bin/sh\\necho hi\\n' > /tmp/ne.sh && chmod 644 /tmp/ne.sh && /tmp/ne.sh",
    )
    .await;
    assert_eq!(o.command.exit_code, Some(126));
    assert!(
        o.stderr_text().contains("Permission denied"),
        "{}",
        o.stderr_text()
    );
    let o = sh(&c, &id, "sh -c 'kill -TERM $$'").await;
    let by_signal = o.command.exit_code.is_none() && o.command.signal.as_deref() == Some("SIGTERM");
    assert!(
        by_signal || o.command.exit_code == Some(143),
        "{:?}",
        o.command
    );
    let long = format!("echo {} | wc -c", "a".repeat(262_144));
    let o = sh(&c, &id, &long).await;
    assert_eq!(
        (o.command.exit_code, o.stdout_text().as_str()),
        (Some(0), "262145\n")
    );
    // argv commands that cannot be executed exit like a shell would.
    let o = run(
        &c,
        &id,
        CreateCommandRequest {
            argv: Some(vec!["no-such-cmd-9f3a".into()]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(o.command.exit_code, Some(127));
    delete(&c, &id).await;
}

/// Reads a finished command's output through the text channel (`?encoding=utf8`).
async fn utf8_events(att: &cove_api_types::Attachment) -> Vec<String> {
    let resp = reqwest::Client::new()
        .get(format!("{}?encoding=utf8", att.url))
        .bearer_auth(&att.token)
        .send()
        .await
        .expect("attach");
    let text = resp.text().await.expect("body");
    let mut out = Vec::new();
    let mut event = String::new();
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("event:") {
            event = e.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data:") {
            if event == "stdout" {
                let ev: OutputEvent = serde_json::from_str(d.trim()).expect("event");
                out.push(ev.data);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c03_bytes_are_exact_and_characters_are_never_split() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let resp = c
        .create_command(
            &id,
            &shell("printf '\\342'; sleep 0.3; printf '\\211\\244\\n'"),
        )
        .await
        .expect("start");
    let o = collect(&c, &resp.attachment, 0, Instant::now()).await;
    assert_eq!(o.stdout, [0xE2, 0x89, 0xA4, 0x0A]);
    let texts = utf8_events(&resp.attachment).await;
    assert_eq!(texts.concat(), "≤\n");
    assert!(texts.iter().all(|t| !t.contains('\u{FFFD}')), "{texts:?}");

    let resp = c
        .create_command(
            &id,
            &shell("i=0; while [ $i -lt 20000 ]; do printf '─'; i=$((i+1)); done"),
        )
        .await
        .expect("start");
    let o = collect(&c, &resp.attachment, 0, Instant::now()).await;
    assert_eq!(o.stdout.len(), 60000);
    assert!(!String::from_utf8(o.stdout.clone())
        .expect("utf8")
        .contains('\u{FFFD}'));
    let texts = utf8_events(&resp.attachment).await;
    assert_eq!(texts.concat().chars().count(), 20000);
    assert!(texts.iter().all(|t| !t.contains('\u{FFFD}')));

    let o = sh(&c, &id, "printf 'A\\000B\\377C\\n'").await;
    assert_eq!(o.stdout, [0x41, 0x00, 0x42, 0xFF, 0x43, 0x0A]);
    assert_eq!(o.command.exit_code, Some(0));
    let o = sh(
        &c,
        &id,
        "mkdir -p /tmp/z && : > /tmp/z/p && : > /tmp/z/q && find /tmp/z -type f -print0 | sort -z",
    )
    .await;
    assert_eq!(o.stdout, b"/tmp/z/p\0/tmp/z/q\0");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c05_stdin_defaults_to_eof_and_can_be_written_and_closed() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let o = run(
        &c,
        &id,
        CreateCommandRequest {
            timeout_s: Some(10.0),
            ..shell("cat")
        },
    )
    .await;
    assert!(
        o.elapsed < Duration::from_secs(2),
        "cat took {:?}",
        o.elapsed
    );
    assert_eq!((o.command.exit_code, o.stdout.len()), (Some(0), 0));

    async fn with_stdin(c: &Client, id: &str, cmd: &str, input: &[u8]) -> String {
        let req = CreateCommandRequest {
            stdin: true,
            ..shell(cmd)
        };
        let resp = c.create_command(id, &req).await.expect("start");
        c.stdin_write(&resp.attachment, input.to_vec())
            .await
            .expect("write");
        c.stdin_close(&resp.attachment).await.expect("close");
        let o = collect(c, &resp.attachment, 0, Instant::now()).await;
        assert_eq!(o.command.exit_code, Some(0));
        o.stdout_text()
    }
    assert_eq!(
        with_stdin(&c, &id, "wc -c | tr -d ' '", b"hello\n").await,
        "6\n"
    );
    assert_eq!(
        with_stdin(&c, &id, "wc -c | tr -d ' '", &[0, 1, 2, 0xFF]).await,
        "4\n"
    );
    assert_eq!(
        with_stdin(&c, &id, "od -An -tx1 | tr -d ' \\n'", &[0, 1, 2, 0xFF]).await,
        "000102ff"
    );

    let resp = c
        .create_command(
            &id,
            &CreateCommandRequest {
                stdin: true,
                ..shell("head -n1")
            },
        )
        .await
        .expect("start");
    c.stdin_write(&resp.attachment, &b"first\nsecond\n"[..])
        .await
        .expect("write");
    let o = collect(&c, &resp.attachment, 0, Instant::now()).await;
    assert_eq!(
        (o.stdout_text().as_str(), o.command.exit_code),
        ("first\n", Some(0))
    );
    let err = c
        .stdin_write(&resp.attachment, &b"x"[..])
        .await
        .expect_err("stdin of an ended command");
    let status = err.status().unwrap_or(0);
    assert!((400..500).contains(&status), "{err}");

    let resp = c
        .create_command(&id, &shell("sleep 0.2"))
        .await
        .expect("start");
    let err = c.stdin_close(&resp.attachment).await.expect_err("no stdin");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::FailedPrecondition)
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c07_timeouts_kill_the_tree_and_no_hidden_default_exists() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let o = run(
        &c,
        &id,
        CreateCommandRequest {
            timeout_s: Some(1.0),
            ..shell("sleep 10; touch /tmp/should-not-exist")
        },
    )
    .await;
    assert!(o.command.timed_out, "{:?}", o.command);
    assert!(
        o.elapsed >= Duration::from_millis(900) && o.elapsed <= Duration::from_secs(3),
        "{:?}",
        o.elapsed
    );
    assert_eq!(o.command.signal.as_deref(), Some("SIGKILL"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        sh(&c, &id, "test -e /tmp/should-not-exist; echo $?")
            .await
            .stdout_text(),
        "1\n"
    );
    assert_eq!(
        sh(&c, &id, "pgrep -x sleep; echo rc=$?")
            .await
            .stdout_text(),
        "rc=1\n"
    );
    let listed = c.list_commands(&id).await.expect("list");
    assert!(listed
        .commands
        .iter()
        .all(|cmd| cmd.state == CommandState::Exited || cmd.id != o.command.id));

    // No timeout given: a 70 s command runs to its end (no hidden 60 s default).
    let o = sh(&c, &id, "sleep 70; echo done").await;
    assert_eq!(
        (o.stdout_text().as_str(), o.command.timed_out),
        ("done\n", false)
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c08_env_is_exact_and_scoped_to_the_command() {
    let c = client();
    let req = CreateSandboxRequest {
        env: [("SBX_LEVEL", "sandbox"), ("SHARED", "from-create")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let id = sandbox_with(&c, "base", req).await;
    let with_env = |cmd: &str, k: &str, v: &str| CreateCommandRequest {
        env: [(k.to_string(), v.to_string())].into(),
        ..shell(cmd)
    };
    let o = run(
        &c,
        &id,
        with_env(
            "printf '%s|%s' \"$SBX_LEVEL\" \"$SHARED\"",
            "SHARED",
            "from-cmd",
        ),
    )
    .await;
    assert_eq!(o.stdout_text(), "sandbox|from-cmd");
    assert_eq!(
        sh(&c, &id, "printf '%s' \"$SHARED\"").await.stdout_text(),
        "from-create"
    );
    let tricky = " a b'c\"d$HOME`x`\nline2 ";
    let o = run(
        &c,
        &id,
        with_env("printf '%s' \"$TRICKY\"", "TRICKY", tricky),
    )
    .await;
    assert_eq!(o.stdout_text(), tricky);
    let o = run(
        &c,
        &id,
        with_env("sh -c 'printf %s \"$SHARED\"'", "SHARED", "nested"),
    )
    .await;
    assert_eq!(o.stdout_text(), "nested");
    for bad in ["1BAD", "A=B", "X;touch /tmp/pwn"] {
        let err = c
            .create_command(&id, &with_env("true", bad, "1"))
            .await
            .expect_err(bad);
        assert_eq!(
            (err.status(), err.api_body().map(|b| b.code)),
            (Some(400), Some(ErrorCode::InvalidArgument))
        );
    }
    assert_eq!(
        sh(&c, &id, "test -e /tmp/pwn; echo $?").await.stdout_text(),
        "1\n"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c09_cwd_and_user_are_enforced() {
    let c = client();
    let id = sandbox(&c, "base").await;
    sh(&c, &id, "mkdir -p /tmp/proj").await;
    let in_proj = |cmd: &str| CreateCommandRequest {
        cwd: Some("/tmp/proj".into()),
        ..shell(cmd)
    };
    run(&c, &id, in_proj("true & wait; pwd > where.txt")).await;
    assert_eq!(
        sh(&c, &id, "cat /tmp/proj/where.txt").await.stdout_text(),
        "/tmp/proj\n"
    );
    assert_eq!(
        run(&c, &id, in_proj("pwd")).await.stdout_text(),
        "/tmp/proj\n"
    );

    let req = CreateCommandRequest {
        cwd: Some("/nonexistent/dir".into()),
        ..shell("touch /tmp/ran-anyway")
    };
    let err = c.create_command(&id, &req).await.expect_err("missing cwd");
    let body = err.api_body().expect("api error").clone();
    assert_eq!(
        (err.status(), body.code),
        (Some(400), ErrorCode::InvalidArgument)
    );
    assert!(
        body.message.contains("/nonexistent/dir"),
        "{}",
        body.message
    );
    assert_eq!(
        sh(&c, &id, "test -e /tmp/ran-anyway; echo $?")
            .await
            .stdout_text(),
        "1\n"
    );

    let as_user = |u: &str, cmd: &str| CreateCommandRequest {
        user: Some(u.into()),
        ..shell(cmd)
    };
    assert_eq!(
        run(&c, &id, as_user("root", "id -un")).await.stdout_text(),
        "root\n"
    );
    assert_eq!(
        run(&c, &id, as_user("user", "id -un")).await.stdout_text(),
        "user\n"
    );
    // The default user of `base` is `user`, in /home/user.
    assert_eq!(
        sh(&c, &id, "id -un; pwd").await.stdout_text(),
        "user\n/home/user\n"
    );

    let opts = UploadOptions {
        user: Some("user".into()),
        mode: None,
    };
    c.upload(&id, "/home/user/n1/n2/f.txt", "x", &opts)
        .await
        .expect("upload");
    let o = run(
        &c,
        &id,
        as_user(
            "user",
            // `find`, not coreutils' `stat`: the statx flags `stat` passes are refused
            // (EINVAL) by the gVisor release Debian 12 ships, and the case runs there too.
            "find /home/user/n1 -printf '%u\\n'",
        ),
    )
    .await;
    assert_eq!(o.stdout_text(), "user\nuser\nuser\n");
    assert_eq!(
        run(&c, &id, as_user("user", "rm -rf /home/user/n1; echo $?"))
            .await
            .stdout_text(),
        "0\n"
    );

    // A sandbox whose default cwd is missing gives a clear error, never exit 255 with no output.
    let bad = CreateSandboxRequest {
        cwd: Some("/nonexistent".into()),
        ..Default::default()
    };
    let id2 = sandbox_with(&c, "base", bad).await;
    let err = c
        .create_command(&id2, &shell("echo hi"))
        .await
        .expect_err("missing default cwd");
    let body = err.api_body().expect("api error").clone();
    assert_eq!(body.code, ErrorCode::InvalidArgument);
    assert!(body.message.contains("/nonexistent"), "{}", body.message);
    delete(&c, &id2).await;
    delete(&c, &id).await;
}
