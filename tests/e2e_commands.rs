//! Command semantics with real users' inputs (issue 3, commands): background commands that are
//! listed, re-attached and forgotten; kill of whole process trees and signals as-is (C06); 100 MB
//! of output streamed and collected (C04, with throughput and memory figures); PTY sessions.
//! Real server, real runc, the real guest agent, the `base` template.

use std::time::{Duration, Instant};

use base64::Engine as _;
use cove_api_types::{CommandState, CreateCommandRequest, ErrorCode};
use cove_client::{AttachEvent, Client, PtyEvent};
use cove_e2e::{client, collect, delete, root_sh, sandbox, sh, shell};
use futures::StreamExt;

fn api_code(err: &cove_client::ClientError) -> Option<ErrorCode> {
    err.api_body().map(|b| b.code)
}

/// Waits until the command has exited (long-polls).
async fn wait_exited(c: &Client, sb: &str, cid: &str) -> cove_api_types::Command {
    let t0 = Instant::now();
    loop {
        let cmd = c
            .get_command(sb, cid, Some(Duration::from_secs(20)))
            .await
            .expect("get command");
        if cmd.state == CommandState::Exited {
            return cmd;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "{cid} never ended");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_commands_are_listed_reattached_and_forgotten() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let t_start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let bg = c
        .create_command(&id, &shell("sleep 300"))
        .await
        .expect("start background");
    let short = c
        .create_command(&id, &shell("printf 'one\\n'; sleep 0.2; printf 'two' >&2"))
        .await
        .expect("start short");
    wait_exited(&c, &id, &short.command.id).await;

    // The list shows pid, command line, start time and state, oldest first.
    let all = c.list_commands(&id).await.expect("list").commands;
    let listed = all
        .iter()
        .find(|x| x.id == bg.command.id)
        .expect("background command listed");
    assert!(listed.pid > 1, "{listed:?}");
    assert_eq!(listed.argv.last().map(String::as_str), Some("sleep 300"));
    assert_eq!(listed.state, CommandState::Running);
    assert!((listed.started_at.timestamp_millis() - t_start_ms).abs() < 5_000);
    assert!(listed.ended_at.is_none());
    let running = c
        .list_commands_in(&id, Some(CommandState::Running))
        .await
        .expect("list running")
        .commands;
    assert!(running.iter().any(|x| x.id == bg.command.id));
    assert!(running.iter().all(|x| x.id != short.command.id));

    // Re-attach after the end, as often as wanted, from any offset: same bytes, then the exit.
    for _ in 0..2 {
        let o = collect(&c, &short.attachment, 0, Instant::now()).await;
        assert_eq!(
            (o.stdout_text().as_str(), o.stderr_text().as_str()),
            ("one\n", "two")
        );
        assert_eq!(o.command.exit_code, Some(0));
    }
    let o = collect(&c, &short.attachment, 2, Instant::now()).await;
    assert_eq!(
        (o.stdout_text().as_str(), o.stderr_text().as_str()),
        ("e\n", "two")
    );
    // A new token works too (the old one is revoked).
    let att = c
        .new_attachment(&id, &short.command.id)
        .await
        .expect("new attachment");
    assert_eq!(
        collect(&c, &att, 0, Instant::now()).await.stdout_text(),
        "one\n"
    );
    // And a running command can be attached to while it runs.
    let mut live = Box::pin(c.attach(&bg.attachment, 0));
    let first = tokio::time::timeout(Duration::from_millis(500), live.next()).await;
    assert!(first.is_err(), "no output and no exit while it runs");

    // Forget: 409 while running, 204 once ended, then it is unknown.
    let err = c
        .forget_command(&id, &bg.command.id)
        .await
        .expect_err("running");
    assert_eq!(api_code(&err), Some(ErrorCode::FailedPrecondition), "{err}");
    assert_eq!(err.status(), Some(409));
    c.forget_command(&id, &short.command.id)
        .await
        .expect("forget ended");
    let err = c
        .get_command(&id, &short.command.id, None)
        .await
        .expect_err("forgotten");
    assert_eq!(api_code(&err), Some(ErrorCode::CommandNotFound), "{err}");
    let err = c
        .forget_command(&id, &short.command.id)
        .await
        .expect_err("twice");
    assert_eq!(api_code(&err), Some(ErrorCode::CommandNotFound), "{err}");
    let listed = c.list_commands(&id).await.expect("list").commands;
    assert!(listed.iter().all(|x| x.id != short.command.id));

    let killed = c
        .kill(&id, &bg.command.id, Some(Duration::from_millis(200)))
        .await
        .expect("kill");
    assert_eq!(killed.state, CommandState::Exited);
    assert_eq!(killed.signal.as_deref(), Some("SIGTERM"));
    // The live attachment ends with the exit.
    let rest: Vec<_> = live.collect().await;
    assert!(
        matches!(rest.last(), Some(Ok(AttachEvent::Exit(_)))),
        "{rest:?}"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c06_kill_ends_whole_trees_and_signals_are_delivered_as_is() {
    let c = client();
    let id = sandbox(&c, "base").await;

    // Step 1: a shell with two background children; kill ends all three.
    let p = c
        .create_command(&id, &shell("sh -c 'sleep 3001 & sleep 3002 & wait'"))
        .await
        .expect("start P");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let killed = c.kill(&id, &p.command.id, None).await.expect("kill P");
    assert_eq!(killed.state, CommandState::Exited);
    assert!(
        killed.signal.is_some(),
        "terminated by a signal: {killed:?}"
    );
    assert_eq!(
        sh(&c, &id, "pgrep -f 'sleep 300[12]'; echo rc=$?")
            .await
            .stdout_text(),
        "rc=1\n"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let running = c
        .list_commands_in(&id, Some(CommandState::Running))
        .await
        .expect("list")
        .commands;
    assert!(running.iter().all(|x| x.id != p.command.id));

    // Step 2: SIGTERM ignored by the shell and inherited by its children: SIGKILL after the
    // documented grace period (2 s), and kill answers only when all of it is gone.
    let q = c
        .create_command(
            &id,
            &shell("sh -c 'trap \"\" TERM; while :; do sleep 1; done'"),
        )
        .await
        .expect("start Q");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let killed = c.kill(&id, &q.command.id, None).await.expect("kill Q");
    let took = t0.elapsed();
    assert_eq!(killed.signal.as_deref(), Some("SIGKILL"), "{killed:?}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(
        sh(&c, &id, "pgrep -f 'whil[e] :|sleep 1$'; echo rc=$?")
            .await
            .stdout_text(),
        "rc=1\n",
        "nothing of Q is left when kill answers"
    );

    // Step 3: SIGINT reaches the process as-is (no escalation).
    let r = c
        .create_command(
            &id,
            &shell("sh -c 'trap \"echo got-int; exit 42\" INT; while :; do sleep 0.2; done'"),
        )
        .await
        .expect("start R");
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.signal(&id, &r.command.id, "SIGINT")
        .await
        .expect("signal");
    let o = collect(&c, &r.attachment, 0, Instant::now()).await;
    assert!(o.stdout_text().contains("got-int"), "{}", o.stdout_text());
    assert_eq!(o.command.exit_code, Some(42));
    assert_eq!(o.command.signal, None);

    // Step 4: nothing comes back after pause and resume.
    let op = c.pause_sandbox(&id).await.expect("pause");
    c.wait_operation(&op.id, Duration::from_secs(60))
        .await
        .expect("paused");
    let op = c.resume_sandbox(&id).await.expect("resume");
    c.wait_operation(&op.id, Duration::from_secs(60))
        .await
        .expect("resumed");
    assert_eq!(
        sh(&c, &id, "pgrep -f 'sleep 300[12]|whil[e] :'; echo rc=$?")
            .await
            .stdout_text(),
        "rc=1\n"
    );
    delete(&c, &id).await;
}

/// Resident memory of a process in KiB (`VmRSS` or `VmHWM` of `/proc/<pid>/status`).
fn proc_kib(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Peak resident memory of a sandbox's guest agent (its PID 1) in KiB, read inside the sandbox
/// so it is the agent's on every runtime (on gVisor the host sees only gVisor's kernel). gVisor
/// keeps no high-water mark (`VmHWM`): there its current `VmRSS` stands in.
async fn agent_peak_kib(c: &cove_client::Client, sandbox: &str) -> u64 {
    let status = root_sh(c, sandbox, "cat /proc/1/status")
        .await
        .stdout_text();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    field("VmHWM:")
        .or_else(|| field("VmRSS:"))
        .expect("the agent's memory in /proc/1/status")
}

const C04_SCRIPT: &str = "head -c 104857600 /dev/zero | tr '\\000' 'A'; \
    printf '\\nEND-OF-STDOUT\\n'; echo STDERR-TAIL >&2; exit 7";
const C04_STDOUT_BYTES: u64 = 104_857_615;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c04_100_mb_streamed_and_collected_with_bounded_memory() {
    let c = client();
    let id = sandbox(&c, "base").await;

    // The test process is the API server (in-process) and the client: sample its memory.
    let baseline_kib = proc_kib("self", "VmRSS:");
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        loop {
            peak = peak.max(proc_kib("self", "VmRSS:"));
            tokio::select! {
                _ = &mut stop_rx => return peak,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    });

    // Streaming mode: every byte, in order, nothing held.
    let t0 = Instant::now();
    let started = c
        .create_command(&id, &shell(C04_SCRIPT))
        .await
        .expect("start");
    let mut events = Box::pin(c.attach(&started.attachment, 0));
    let (mut out_bytes, mut tail, mut stderr) = (0u64, Vec::new(), Vec::new());
    let mut all_a = true;
    let mut exit = None;
    let mut gaps = 0;
    while let Some(ev) = events.next().await {
        match ev.expect("event") {
            AttachEvent::Stdout { data, .. } => {
                let before_end = (C04_STDOUT_BYTES - 15).saturating_sub(out_bytes) as usize;
                all_a &= data[..data.len().min(before_end)]
                    .iter()
                    .all(|&b| b == b'A');
                out_bytes += data.len() as u64;
                tail.extend_from_slice(&data);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
            AttachEvent::Stderr { data, .. } => stderr.extend_from_slice(&data),
            AttachEvent::Gap { .. } => gaps += 1,
            AttachEvent::Exit(cmd) => exit = Some(cmd),
        }
    }
    let streamed_in = t0.elapsed();
    let exit = exit.expect("exit event");
    assert_eq!(gaps, 0);
    assert_eq!(out_bytes, C04_STDOUT_BYTES);
    assert!(all_a, "stdout is 100 MiB of 'A' before the last line");
    assert!(tail.ends_with(b"\nEND-OF-STDOUT\n"));
    assert_eq!(String::from_utf8_lossy(&stderr), "STDERR-TAIL\n");
    assert_eq!(exit.exit_code, Some(7));
    assert!(!exit.truncated, "100 MB is under the default 1 GiB cap");

    // Buffered mode: one answer of at most 1 MiB (the default budget) keeping head and tail.
    let t1 = Instant::now();
    let buffered = c
        .create_command(&id, &shell(C04_SCRIPT))
        .await
        .expect("start");
    let out = c
        .command_output(
            &id,
            &buffered.command.id,
            Some(Duration::from_secs(60)),
            None,
        )
        .await
        .expect("collect");
    let collected_in = t1.elapsed();
    let b64 = base64::engine::general_purpose::STANDARD;
    let stdout = b64.decode(&out.stdout).expect("stdout base64");
    let stderr = b64.decode(&out.stderr).expect("stderr base64");
    assert_eq!(out.command.state, CommandState::Exited);
    assert_eq!(out.command.exit_code, Some(7));
    assert_eq!(out.command.output_bytes, C04_STDOUT_BYTES + 12);
    assert_eq!(String::from_utf8_lossy(&stderr), "STDERR-TAIL\n");
    assert!(out.truncated);
    let omitted = out.omitted.expect("omitted range");
    assert_eq!(omitted.offset, 512 * 1024);
    assert_eq!(omitted.stdout_at, 512 * 1024);
    assert_eq!(
        stdout.len() as u64 + stderr.len() as u64 + omitted.len,
        C04_STDOUT_BYTES + 12
    );
    assert!(!stdout.is_empty() && stdout.len() <= 1 << 20);
    assert!(stdout[..512 * 1024].iter().all(|&b| b == b'A'));
    assert!(
        stdout.ends_with(b"\nEND-OF-STDOUT\n"),
        "the last line is kept"
    );

    // Step 3: the sandbox answers at once.
    let t2 = Instant::now();
    let alive = sh(&c, &id, "echo alive").await;
    assert_eq!(alive.stdout_text(), "alive\n");
    assert!(t2.elapsed() < Duration::from_secs(5), "{:?}", t2.elapsed());

    let _ = stop_tx.send(());
    let peak_kib = sampler.await.expect("sampler");
    let server_growth_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    let agent_peak_mib = agent_peak_kib(&c, &id).await / 1024;

    // Throughput beside `cat` of the same bytes on the host, in the same run.
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c 104857600 /dev/zero | tr '\\000' A > {}; printf '\\nEND-OF-STDOUT\\n' >> {}",
            file.path().display(),
            file.path().display()
        ))
        .status()
        .expect("make the file");
    assert!(made.success());
    let t3 = Instant::now();
    let mut cat = tokio::process::Command::new("cat")
        .arg(file.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cat");
    let mut pipe = cat.stdout.take().expect("stdout");
    let mut buf = vec![0u8; 1 << 16];
    let mut cat_bytes = 0u64;
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut pipe, &mut buf)
            .await
            .expect("read");
        if n == 0 {
            break;
        }
        cat_bytes += n as u64;
    }
    cat.wait().await.expect("cat exits");
    let cat_in = t3.elapsed();
    assert_eq!(cat_bytes, C04_STDOUT_BYTES);
    let mb = C04_STDOUT_BYTES as f64 / 1e6;
    eprintln!(
        "C04: streamed {mb:.0} MB in {streamed_in:.2?} ({:.0} MB/s); host cat of the same bytes \
         {cat_in:.2?} ({:.0} MB/s); buffered collect {collected_in:.2?}; server+client RSS \
         growth {server_growth_mib} MiB; agent peak RSS {agent_peak_mib} MiB",
        mb / streamed_in.as_secs_f64(),
        mb / cat_in.as_secs_f64(),
    );
    assert!(
        server_growth_mib < 100,
        "server memory grew {server_growth_mib} MiB"
    );
    assert!(agent_peak_mib < 100, "agent peak {agent_peak_mib} MiB");
    delete(&c, &id).await;
}

/// Reads a pty session until its exit; returns the terminal output and the command.
async fn pty_until_exit(
    reader: &mut cove_client::PtyReader,
) -> (String, Box<cove_api_types::Command>) {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), reader.next())
            .await
            .expect("pty output in time")
            .expect("an event")
            .expect("pty event")
        {
            PtyEvent::Output(data) => out.extend_from_slice(&data),
            PtyEvent::Gap { .. } => panic!("no gap in a short session"),
            PtyEvent::Exit(cmd) => return (String::from_utf8_lossy(&out).into_owned(), cmd),
        }
    }
}

/// Reads a pty session until its output contains `needle`; returns everything read.
async fn pty_until(reader: &mut cove_client::PtyReader, seen: &mut String, needle: &str) {
    while !seen.contains(needle) {
        match tokio::time::timeout(Duration::from_secs(20), reader.next())
            .await
            .unwrap_or_else(|_| panic!("waiting for {needle:?}, got {seen:?}"))
            .expect("an event")
            .expect("pty event")
        {
            PtyEvent::Output(data) => seen.push_str(&String::from_utf8_lossy(&data)),
            other => panic!("waiting for {needle:?}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pty_sessions_are_terminals_with_resize_and_input() {
    let c = client();
    let id = sandbox(&c, "base").await;

    // `tty` names the terminal.
    let tty = c
        .create_command(
            &id,
            &CreateCommandRequest {
                argv: Some(vec!["tty".into()]),
                pty: true,
                ..Default::default()
            },
        )
        .await
        .expect("start tty");
    assert!(tty.command.pty);
    let (_w, mut r) = c.pty(&tty.attachment, 0).await.expect("pty socket");
    let (out, cmd) = pty_until_exit(&mut r).await;
    let name = out.trim_end();
    assert!(
        name.strip_prefix("/dev/pts/")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        "{out:?}"
    );
    assert_eq!(cmd.exit_code, Some(0));

    // The initial size, a resize, and input read by an interactive `read`.
    let session = c
        .create_command(
            &id,
            &CreateCommandRequest {
                shell: Some("stty size; read line; stty size; echo \"got:$line\"".into()),
                pty: true,
                cols: Some(90),
                rows: Some(30),
                ..Default::default()
            },
        )
        .await
        .expect("start session");
    let (mut w, mut r) = c.pty(&session.attachment, 0).await.expect("pty socket");
    let mut seen = String::new();
    pty_until(&mut r, &mut seen, "30 90").await;
    w.resize(120, 40).await.expect("resize");
    // The resize is applied before the input that follows it on the socket.
    w.write(&b"hello\r"[..]).await.expect("type");
    let (rest, cmd) = pty_until_exit(&mut r).await;
    seen.push_str(&rest);
    assert!(
        seen.contains("hello"),
        "the terminal echoes input: {seen:?}"
    );
    assert!(seen.contains("40 120"), "{seen:?}");
    assert!(seen.contains("got:hello"), "{seen:?}");
    assert_eq!(cmd.exit_code, Some(0));

    // The output is in the command's log too: a plain attach replays it.
    let replay = collect(&c, &session.attachment, 0, Instant::now()).await;
    assert!(replay.stdout_text().contains("got:hello"));
    assert!(replay.stderr.is_empty(), "a terminal has one stream");

    // Without pty, the WebSocket is refused with a typed error.
    let plain = c
        .create_command(&id, &shell("true"))
        .await
        .expect("start plain");
    let err = c.pty(&plain.attachment, 0).await.err().expect("refused");
    assert_eq!(api_code(&err), Some(ErrorCode::FailedPrecondition), "{err}");
    // cols without pty is a caller error.
    let err = c
        .create_command(
            &id,
            &CreateCommandRequest {
                cols: Some(10),
                ..shell("true")
            },
        )
        .await
        .expect_err("cols without pty");
    assert_eq!(api_code(&err), Some(ErrorCode::InvalidArgument), "{err}");
    delete(&c, &id).await;
}

/// A PTY WebSocket opened as a browser must: no `Authorization` header, the attachment token in
/// a `cove.bearer.<token>` subprotocol beside `cove.pty`, which the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pty_tokens_ride_in_a_subprotocol_for_browsers() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::{Error as WsError, Message};

    let c = client();
    let id = sandbox(&c, "base").await;
    let started = c
        .create_command(
            &id,
            &CreateCommandRequest {
                shell: Some("echo from-a-browser".into()),
                pty: true,
                ..Default::default()
            },
        )
        .await
        .expect("start");
    let url = format!("{}/pty", started.attachment.url.replacen("http", "ws", 1));
    let request = |token: &str| {
        let mut request = url.as_str().into_client_request().expect("request");
        let offered = format!("cove.pty, cove.bearer.{token}");
        request.headers_mut().insert(
            "sec-websocket-protocol",
            offered.parse().expect("header value"),
        );
        request
    };

    match tokio_tungstenite::connect_async(request("wrong")).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("a wrong token must be refused: {other:?}"),
    }

    let (mut socket, response) =
        tokio_tungstenite::connect_async(request(&started.attachment.token))
            .await
            .expect("upgrade with the token in a subprotocol");
    assert_eq!(response.headers()["sec-websocket-protocol"], "cove.pty");
    let mut output = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(message) = socket.next().await {
            match message.expect("frame") {
                Message::Binary(data) => output.extend_from_slice(&data),
                Message::Text(text) if text.contains("\"exit\"") => return true,
                _ => {}
            }
        }
        false
    })
    .await
    .expect("the session ends in time");
    assert!(ended, "an exit frame");
    assert!(
        String::from_utf8_lossy(&output).contains("from-a-browser"),
        "{:?}",
        String::from_utf8_lossy(&output)
    );
    delete(&c, &id).await;
}
