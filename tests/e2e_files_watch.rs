//! `GET files:watch` (SSE): changes below a directory, recursive watches following new
//! subdirectories (`mkdir -p a/b/c` and then a file in `c`), the end of a watch when its
//! directory goes, and stopping a watch freeing the sandbox's inotify watches.

use std::time::{Duration, Instant};

use cove_api_types::{ErrorCode, FileEvent, FileEventKind, FileType};
use cove_client::Client;
use cove_e2e::{client, delete, sandbox, sh};
use futures::{Stream, StreamExt};

/// Events until one matches `until` (included), or panics after 15 s.
async fn events_until(
    events: &mut (impl Stream<Item = cove_client::Result<FileEvent>> + Unpin),
    until: impl Fn(&FileEvent) -> bool,
) -> Vec<FileEvent> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, events.next()).await;
        let ev = match next {
            Ok(Some(ev)) => ev.expect("event"),
            Ok(None) => panic!("the watch ended; seen {seen:#?}"),
            Err(_) => panic!("no matching event in time; seen {seen:#?}"),
        };
        let done = until(&ev);
        seen.push(ev);
        if done {
            return seen;
        }
    }
}

fn has(events: &[FileEvent], kind: FileEventKind, path: &str, ty: FileType) -> bool {
    events
        .iter()
        .any(|e| e.event == kind && e.path == path && e.file_type == ty)
}

/// Inotify watches the sandbox's agent (PID 1) holds, from `/proc/1/fdinfo`.
async fn agent_watches(_c: &Client, id: &str) -> usize {
    // Read on the host: the agent is not dumpable, so its `/proc` entries are out of reach
    // from inside the sandbox, even for its root.
    let data_dir = &cove_e2e::server().data_dir;
    let state = std::process::Command::new("runc")
        .arg("--root")
        .arg(data_dir.join("runc"))
        .args(["state", id])
        .output()
        .expect("runc state");
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).expect("runc state json");
    let pid = state["pid"].as_u64().expect("init pid");
    let mut count = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
    {
        if let Ok(info) = std::fs::read_to_string(fd.path()) {
            count += info
                .lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count();
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_watch_sees_every_change_including_new_nested_dirs() {
    let c = client();
    let id = sandbox(&c, "base").await;
    sh(&c, &id, "mkdir -p /tmp/w").await;
    let events = c.watch_files(&id, "/tmp/w", true).await.expect("watch");
    let mut events = Box::pin(events);
    // `f` is written right after its directories appear: it may exist before `c` is watched,
    // and is reported as created either way.
    sh(&c, &id, "mkdir -p /tmp/w/a/b/c && echo hi > /tmp/w/a/b/c/f").await;
    let seen = events_until(&mut events, |e| {
        e.event == FileEventKind::Create && e.path == "/tmp/w/a/b/c/f"
    })
    .await;
    for dir in ["/tmp/w/a", "/tmp/w/a/b", "/tmp/w/a/b/c"] {
        assert!(
            has(&seen, FileEventKind::Create, dir, FileType::Dir),
            "{dir}: {seen:#?}"
        );
    }
    assert!(
        has(
            &seen,
            FileEventKind::Create,
            "/tmp/w/a/b/c/f",
            FileType::File
        ),
        "{seen:#?}"
    );
    sh(
        &c,
        &id,
        "mv /tmp/w/a/b/c/f /tmp/w/a/b/c/g && chmod 600 /tmp/w/a/b/c/g && rm /tmp/w/a/b/c/g",
    )
    .await;
    let seen = events_until(&mut events, |e| {
        e.event == FileEventKind::Remove && e.path == "/tmp/w/a/b/c/g"
    })
    .await;
    let rename = seen
        .iter()
        .find(|e| e.event == FileEventKind::Rename)
        .expect("rename");
    assert_eq!(
        (rename.path.as_str(), rename.from.as_deref()),
        ("/tmp/w/a/b/c/g", Some("/tmp/w/a/b/c/f"))
    );
    assert!(
        has(
            &seen,
            FileEventKind::Chmod,
            "/tmp/w/a/b/c/g",
            FileType::File
        ),
        "{seen:#?}"
    );

    // Every level is watched now: a file created later in `c` is seen, with its write.
    sh(&c, &id, "printf late > /tmp/w/a/b/c/late").await;
    let seen = events_until(&mut events, |e| {
        e.event == FileEventKind::Write && e.path == "/tmp/w/a/b/c/late"
    })
    .await;
    assert!(
        has(
            &seen,
            FileEventKind::Create,
            "/tmp/w/a/b/c/late",
            FileType::File
        ),
        "{seen:#?}"
    );

    // Removing the watched directory ends the watch after its events.
    sh(&c, &id, "rm -rf /tmp/w").await;
    let seen = events_until(&mut events, |e| {
        e.event == FileEventKind::Remove && e.path == "/tmp/w"
    })
    .await;
    assert!(
        has(
            &seen,
            FileEventKind::Remove,
            "/tmp/w/a/b/c/late",
            FileType::File
        ),
        "{seen:#?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "{end:?}");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_watch_sees_its_directory_only() {
    let c = client();
    let id = sandbox(&c, "base").await;
    sh(&c, &id, "mkdir -p /tmp/p/sub").await;
    let mut events = Box::pin(c.watch_files(&id, "/tmp/p", false).await.expect("watch"));
    sh(&c, &id, "touch /tmp/p/sub/deep && touch /tmp/p/top").await;
    let seen = events_until(&mut events, |e| e.path == "/tmp/p/top").await;
    assert!(
        seen.iter().all(|e| !e.path.starts_with("/tmp/p/sub/")),
        "{seen:#?}"
    );
    // Errors come before the stream: a missing path, a file.
    let err = c
        .watch_files(&id, "/tmp/none", true)
        .await
        .err()
        .expect("404");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::FileNotFound)
    );
    let err = c
        .watch_files(&id, "/tmp/p/top", true)
        .await
        .err()
        .expect("400");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::InvalidArgument)
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_watch_frees_its_inotify_watches() {
    let c = client();
    let id = sandbox(&c, "base").await;
    sh(&c, &id, "mkdir -p /tmp/s/x /tmp/s/y/z").await;
    assert_eq!(agent_watches(&c, &id).await, 0);
    let mut events = Box::pin(c.watch_files(&id, "/tmp/s", true).await.expect("watch"));
    assert_eq!(agent_watches(&c, &id).await, 4, "/tmp/s, x, y, y/z");
    sh(&c, &id, "touch /tmp/s/one").await;
    events_until(&mut events, |e| e.path == "/tmp/s/one").await;
    drop(events);
    // The server notices the client left at its next write (an event or a keep-alive) and
    // closes the sandbox's watch; the agent then closes the inotify instance.
    let began = Instant::now();
    let mut count = usize::MAX;
    while began.elapsed() < Duration::from_secs(20) {
        sh(&c, &id, "touch /tmp/s/poke").await;
        count = agent_watches(&c, &id).await;
        if count == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count, 0, "watches left after the client went away");
    println!("watch freed {:?} after the client left", began.elapsed());
    delete(&c, &id).await;
}
