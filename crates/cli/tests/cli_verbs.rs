//! The `cove` binary against a real server (the e2e harness: runc, real guest agents, `tiny`
//! sandboxes): each verb added for scripts and agents, and each exit-code rule.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, ResourcesRequest};
use cove_e2e::{client, delete, sandbox, sandbox_with, server};

/// What one `cove` run did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `cove ARGS` against the test server (URL and token from the environment), with stdin closed.
fn cove_command(args: &[&str]) -> tokio::process::Command {
    let s = server();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cove"));
    cmd.args(args)
        .env("COVE_URL", &s.api_url)
        .env("COVE_TOKEN", &s.token)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs `cove ARGS` to its end (at most 120 s).
async fn cove(args: &[&str]) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(120), cove_command(args).output())
        .await
        .expect("cove finished within 120 s")
        .expect("cove runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `cove:` lines and `error:` lines cove itself wrote to stderr.
fn cove_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("cove:") || l.starts_with("error:"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_keep_the_commands_apart_from_coves_own() {
    let c = client();
    let id = sandbox(&c, "tiny").await;

    let r = cove(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ])
    .await;
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (3, "out\n", "err\n")
    );

    // Cove's own failures are 125, whatever the cause.
    let r = cove(&["exec", "sb-nope", "--", "true"]).await;
    assert_eq!(r.code, 125, "{r:?}");
    assert!(r.stderr.contains("sandbox_not_found"), "{r:?}");
    let r = cove(&["exec", &id, "--no-such-flag"]).await;
    assert_eq!(r.code, 125, "{r:?}");
    let r = cove_command(&["ls"])
        .env("COVE_TOKEN", "wrong")
        .output()
        .await
        .expect("runs");
    assert_eq!(r.status.code(), Some(125));
    let r = cove(&["--help"]).await;
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("125"),
        "the exit codes are documented: {}",
        r.stdout
    );

    // --json: the command's status on one line after its output.
    let r = cove(&["exec", "--json", &id, "--", "sh", "-c", "echo hi; exit 4"]).await;
    assert_eq!(r.code, 4);
    let mut lines = r.stdout.lines();
    assert_eq!(lines.next(), Some("hi"));
    let status: serde_json::Value =
        serde_json::from_str(lines.next().expect("json line")).expect("json");
    assert_eq!(
        status,
        serde_json::json!({"exit_code": 4, "signal": null, "oom_killed": false,
            "timed_out": false, "suspended": false})
    );

    // A timeout: 124 and one line saying so.
    let r = cove(&[
        "exec",
        "--json",
        &id,
        "--timeout",
        "0.5",
        "--",
        "sleep",
        "30",
    ])
    .await;
    assert_eq!(r.code, 124, "{r:?}");
    assert_eq!(cove_lines(&r.stderr).len(), 1, "{r:?}");
    assert!(r.stderr.contains("timed out"), "{r:?}");
    assert!(r.stdout.contains("\"timed_out\":true"), "{r:?}");

    // A signal: 128 + N.
    let r = cove(&["exec", &id, "--", "sh", "-c", "kill -TERM $$"]).await;
    assert_eq!(r.code, 143, "{r:?}");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_said_in_one_line() {
    let c = client();
    let id = sandbox_with(
        &c,
        "tiny",
        CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                memory_mib: Some(128),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let r = cove(&[
        "exec",
        "--json",
        &id,
        "--timeout",
        "60",
        "--shell",
        "head -c 1073741824 /dev/zero | tail > /dev/null",
    ])
    .await;
    assert_eq!(r.code, 137, "{r:?}");
    let lines = cove_lines(&r.stderr);
    assert_eq!(lines.len(), 1, "{r:?}");
    assert!(lines[0].contains("out-of-memory"), "{r:?}");
    assert!(r.stdout.contains("\"oom_killed\":true"), "{r:?}");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_commands_ps_logs_attach_kill() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let r = cove(&[
        "exec",
        "-d",
        &id,
        "--",
        "sh",
        "-c",
        "echo started; sleep 60",
    ])
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let cmd = r.stdout.trim().to_owned();
    assert!(cmd.starts_with("cmd-"), "{r:?}");

    let ps = cove(&["ps", &id]).await;
    assert!(ps.stdout.starts_with("ID"), "{ps:?}");
    assert!(
        ps.stdout.contains(&cmd) && ps.stdout.contains("running"),
        "{ps:?}"
    );

    // logs without -f: what it wrote so far (wait until "started" was written).
    let t0 = Instant::now();
    loop {
        let logs = cove(&["logs", &id, &cmd]).await;
        if logs.stdout == "started\n" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{logs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = cove(&["logs", "--offset", "3", &id, &cmd]).await;
    assert_eq!((logs.code, logs.stdout.as_str()), (0, "rted\n"));

    // kill --signal: one signal; attach follows to the end and exits 128 + 15.
    let attach = cove_command(&["attach", &id, &cmd]).output();
    let killer = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cove(&["kill", &id, &cmd, "--signal", "TERM"]).await
    };
    let (attached, killed) = tokio::join!(attach, killer);
    assert_eq!(killed.code, 0, "{killed:?}");
    let attached = attached.expect("attach runs");
    assert_eq!(attached.status.code(), Some(143));
    assert_eq!(String::from_utf8_lossy(&attached.stdout), "started\n");

    let ps = cove(&["ps", &id]).await;
    assert!(!ps.stdout.contains(&cmd), "not running any more: {ps:?}");
    let ps = cove(&["ps", "-a", &id]).await;
    assert!(
        ps.stdout.contains(&cmd) && ps.stdout.contains("SIGTERM"),
        "{ps:?}"
    );

    // kill without --signal: the whole tree, answered once it is gone.
    let r = cove(&["exec", "-d", &id, "--", "sh", "-c", "sleep 60 & sleep 60"]).await;
    let tree = r.stdout.trim().to_owned();
    let killed = cove(&["kill", &id, &tree, "--grace-ms", "100"]).await;
    assert_eq!(killed.stdout.trim(), format!("{tree} exited"), "{killed:?}");

    // logs -f follows until the end.
    let r = cove(&[
        "exec",
        "-d",
        &id,
        "--",
        "sh",
        "-c",
        "echo a; sleep 1; echo b",
    ])
    .await;
    let follow = r.stdout.trim().to_owned();
    let logs = cove(&["logs", "-f", &id, &follow]).await;
    assert_eq!((logs.code, logs.stdout.as_str()), (0, "a\nb\n"));
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_recursive_both_ways() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("project");
    std::fs::create_dir_all(src.join("src/deep")).expect("mkdir");
    std::fs::create_dir_all(src.join("empty")).expect("mkdir");
    std::fs::write(src.join("README"), "read me\n").expect("write");
    std::fs::write(src.join("src/deep/run.sh"), "#!/bin/sh\necho ran\n").expect("write");
    let big = cove_e2e::random_bytes(9 << 20);
    std::fs::write(src.join("src/big.bin"), &big).expect("write");
    set_mode(&src.join("src/deep/run.sh"), 0o755);

    let up = cove(&[
        "cp",
        "-r",
        src.to_str().expect("utf-8"),
        &format!("{id}:/home/user/"),
    ])
    .await;
    assert_eq!(up.code, 0, "{up:?}");
    let ran = cove(&["exec", &id, "--", "/home/user/project/src/deep/run.sh"]).await;
    assert_eq!(ran.stdout, "ran\n", "{ran:?}");
    let sum = cove(&[
        "exec",
        &id,
        "--",
        "sha256sum",
        "/home/user/project/src/big.bin",
    ])
    .await;
    assert!(
        sum.stdout.starts_with(&cove_e2e::sha256_hex(&big)),
        "{sum:?}"
    );
    let ls = cove(&["files", "ls", &id, "/home/user/project/empty"]).await;
    assert_eq!(ls.code, 0, "{ls:?}");

    let back = dir.path().join("back");
    let down = cove(&[
        "cp",
        "-r",
        &format!("{id}:/home/user/project"),
        back.to_str().expect("utf-8"),
    ])
    .await;
    assert_eq!(down.code, 0, "{down:?}");
    assert_eq!(
        std::fs::read(back.join("README")).expect("read"),
        b"read me\n"
    );
    assert_eq!(std::fs::read(back.join("src/big.bin")).expect("read"), big);
    assert_eq!(mode(&back.join("src/deep/run.sh")), 0o755);
    assert!(back.join("empty").is_dir());

    // Without -r, a directory is refused with the way out.
    let r = cove(&[
        "cp",
        src.to_str().expect("utf-8"),
        &format!("{id}:/home/user/x"),
    ])
    .await;
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("pass -r"), "{r:?}");
    delete(&c, &id).await;
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_name_the_next_step_and_wake_takes_it() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    assert_eq!(cove(&["pause", &id]).await.code, 0);
    let r = cove(&["exec", &id, "--", "true"]).await;
    assert_eq!(r.code, 125);
    assert!(
        r.stderr.contains(&format!("run 'cove resume {id}'")),
        "{r:?}"
    );
    // `wake` is the one verb for every resting state: it resumes a paused sandbox.
    let r = cove(&["wake", &id]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("running"), "{r:?}");
    assert_eq!(cove(&["pause", &id]).await.code, 0);
    let r = cove(&["exec", "--wake", &id, "--", "echo", "thawed"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "thawed\n"), "{r:?}");

    assert_eq!(cove(&["suspend", &id]).await.code, 0);
    let r = cove(&["files", "ls", &id, "/"]).await;
    assert!(r.stderr.contains(&format!("run 'cove wake {id}'")), "{r:?}");
    let r = cove(&["resume", &id]).await;
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains(&format!("run 'cove wake {id}'")), "{r:?}");
    assert!(r.stderr.contains("resume thaws a paused sandbox"), "{r:?}");
    let r = cove(&["files", "--wake", "ls", &id, "/"]).await;
    assert_eq!(r.code, 0, "{r:?}");

    assert_eq!(cove(&["suspend", &id]).await.code, 0);
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("f.txt");
    std::fs::write(&local, "via cp --wake").expect("write");
    let r = cove(&[
        "cp",
        "--wake",
        local.to_str().expect("utf-8"),
        &format!("{id}:/tmp/f.txt"),
    ])
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        c.read_file(&id, "/tmp/f.txt").await.expect("read"),
        b"via cp --wake"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_cuts_a_command_short_with_one_line() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let exec = cove_command(&[
        "exec",
        "--json",
        &id,
        "--",
        "sh",
        "-c",
        "echo before; sleep 60",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("exec starts");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cove(&["suspend", &id]).await.code, 0);
    let out = tokio::time::timeout(Duration::from_secs(60), exec.wait_with_output())
        .await
        .expect("exec ends after the suspend")
        .expect("exec output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{stderr}");
    let lines = cove_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("cut short") && lines[0].contains(&format!("cove wake {id}")));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"suspended\":true"));
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_is_listed_and_filtered_and_resources_are_shared() {
    let c = client();
    cove_e2e::ensure_template(&c, "tiny").await;
    let r = cove(&[
        "create",
        "--template",
        "tiny",
        "--metadata",
        "team=cli-red",
        "--memory-mib",
        "300",
    ])
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let red = r.stdout.trim().to_owned();
    let r = cove(&[
        "run",
        "--template",
        "tiny",
        "--memory-mib",
        "200",
        "--",
        "sh",
        "-c",
        "echo one-shot",
    ])
    .await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "one-shot\n"), "{r:?}");
    let blue = sandbox_with(
        &c,
        "tiny",
        CreateSandboxRequest {
            metadata: [("team".to_owned(), "cli-blue".to_owned())].into(),
            ..Default::default()
        },
    )
    .await;
    let ls = cove(&["ls", "-m", "team=cli-red"]).await;
    assert!(ls.stdout.contains("METADATA"), "{ls:?}");
    assert!(
        ls.stdout.contains(&red) && ls.stdout.contains("team=cli-red"),
        "{ls:?}"
    );
    assert!(!ls.stdout.contains(&blue), "{ls:?}");
    let ls = cove(&["ls", "--json", "-m", "team=cli-blue"]).await;
    let listed: serde_json::Value = serde_json::from_str(&ls.stdout).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{ls:?}");
    assert_eq!(listed[0]["id"], blue.as_str());
    assert_eq!(
        c.get_sandbox(&red).await.expect("get").resources.memory_mib,
        300
    );
    delete(&c, &red).await;
    delete(&c, &blue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_cove_quietly() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let bin = env!("CARGO_BIN_EXE_cove");
    // `head` leaves after one line; `cove events` must notice without a next event, and
    // `cove ls` must not panic when its output has no reader.
    let script = format!(
        "'{bin}' events --after 0 | head -n 1; echo \"events=${{PIPESTATUS[0]}}\"; \
         '{bin}' ps -a {id} | true; echo \"ps=${{PIPESTATUS[0]}}\""
    );
    let s = server();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("bash")
            .args(["-c", &script])
            .env("COVE_URL", &s.api_url)
            .env("COVE_TOKEN", &s.token)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the pipeline ends without new events")
    .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("events=141"), "{stdout} {stderr}");
    assert!(
        stdout.contains("ps=0") || stdout.contains("ps=141"),
        "{stdout} {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_printed() {
    let r = cove(&["completions", "bash"]).await;
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("cove") && r.stdout.contains("attach"),
        "{}",
        r.stdout.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_shows_a_sandboxs_use() {
    let c = client();
    let req = CreateSandboxRequest {
        resources: Some(ResourcesRequest {
            memory_mib: Some(200),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = sandbox_with(&c, "tiny", req).await;
    let r = cove(&["metrics", &id]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with(&format!("sandbox:  {id}\n")), "{r:?}");
    assert!(r.stdout.contains(" of 200.0 MiB"), "{r:?}");
    assert!(r.stdout.contains("network:  not measured\n"), "{r:?}");
    let r = cove(&["metrics", "--json", &id]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["current"]["memory"]["limit_bytes"], 200u64 << 20);
    delete(&c, &id).await;
    let r = cove(&["metrics", &id]).await;
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("sandbox_not_found") || r.stderr.contains("not found"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_put_ls_rm_and_a_create_served_by_the_pool() {
    let c = client();
    cove_e2e::ensure_template(&c, "tiny").await;
    // A size no other test asks for, so only this test's create matches.
    let r = cove(&[
        "pool",
        "put",
        "cli-warm",
        "-t",
        "tiny",
        "--min-ready",
        "1",
        "--memory-mib",
        "352",
    ])
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("cli-warm"), "{r:?}");
    let began = Instant::now();
    loop {
        let r = cove(&["pool", "ls", "--json"]).await;
        assert_eq!(r.code, 0, "{r:?}");
        let pools: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
        let ready = pools
            .as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == "cli-warm"))
            .map(|p| p["ready"].as_u64().unwrap_or(0));
        if ready == Some(1) {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(120), "{pools}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = cove(&["create", "-t", "tiny", "--memory-mib", "352"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.stdout.trim().to_string();
    let got = c.pool("cli-warm").await.expect("pool");
    assert_eq!(got.hits, 1, "{got:?}");
    let r = cove(&["pool", "ls"]).await;
    assert!(r.stdout.starts_with("NAME"), "{r:?}");
    assert!(r.stdout.contains("cli-warm"), "{r:?}");
    let r = cove(&["pool", "rm", "cli-warm"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "cli-warm\n"), "{r:?}");
    let r = cove(&["pool", "rm", "cli-warm"]).await;
    assert_eq!(r.code, 125, "{r:?}");
    assert!(r.stderr.contains("pool_not_found"), "{r:?}");
    delete(&c, &id).await;
}
