//! Watching a directory: the streaming `WatchDir` (async SDK) and the polled watchers
//! `CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher` (sync SDK), over Cove's file watch.
//!
//! Event names are relative to the watched directory. Cove reports a rename once with both
//! paths; envd (inotify) reports the old name as `RENAME` and the new one as `CREATE`, so a
//! rename becomes those two events. Cove writes an upload to a temporary file
//! ([`UPLOAD_TEMP_PREFIX`]) and renames it into place; the temporary file's events are dropped
//! and its rename into place is reported as envd's in-place upload is: `CREATE`, `CHMOD`,
//! `WRITE`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cove_api_types::{FileEvent, FileEventKind};
use cove_control_plane::orgs::scope::carried;
use cove_control_plane::{SandboxPath, ServiceError, WatchOptions};
use futures::stream::BoxStream;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::filesystem::{entry, user_and_path};
use super::{
    connect_timeout, end_frame, keepalive_interval, message_frame, stream_error, stream_request,
    stream_response, unary_request, unary_response,
};
use crate::dispatch::Target;
use crate::error::{ConnectCode, ConnectError};
use crate::model::envd::{
    CreateWatcherResponse, Empty, FilesystemEvent, WatchDirMessage, WatchRequest, WatcherEvents,
    WatcherRequest,
};
use crate::E2b;

/// Name prefix of the temporary files Cove's guest agent writes uploads to.
pub const UPLOAD_TEMP_PREFIX: &str = ".cove-upload-";

fn is_upload_temp(path: &str) -> bool {
    super::paths::base_name(path).starts_with(UPLOAD_TEMP_PREFIX)
}

/// Most events a polled watcher buffers between two `GetWatcherEvents` (older ones go).
pub const MAX_BUFFERED_EVENTS: usize = 10_000;

struct Watcher {
    sandbox: String,
    events: Arc<Mutex<Vec<FilesystemEvent>>>,
    task: tokio::task::JoinHandle<()>,
}

/// The polled watchers, by id.
#[derive(Clone, Default)]
pub struct Watchers {
    inner: Arc<Mutex<HashMap<String, Watcher>>>,
}

impl Watchers {
    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, Watcher>> {
        self.inner.lock()
    }
}

type Batches = BoxStream<'static, Result<Vec<FileEvent>, ServiceError>>;

/// Starts a Cove watch for a request: the resolved directory and the event batches.
async fn open(
    e2b: &E2b,
    t: &Target,
    headers: &HeaderMap,
    req: &WatchRequest,
) -> Result<(String, String, Batches), ConnectError> {
    let (user, dir) = user_and_path(t, headers, &req.path)?;
    let batches = e2b
        .cp
        .watch_files(
            &t.cove_id,
            SandboxPath(dir.clone().into_bytes()),
            Some(user.clone()),
            WatchOptions {
                recursive: req.recursive,
            },
        )
        .await
        .map_err(|e| match e {
            ServiceError::FileNotFound(_) => ConnectError::new(
                ConnectCode::NotFound,
                format!("path '{dir}' does not exist"),
            ),
            ServiceError::Invalid(_) => ConnectError::new(
                ConnectCode::InvalidArgument,
                format!("path '{dir}' is not a directory"),
            ),
            other => other.into(),
        })?;
    Ok((user, dir, batches))
}

/// The envd events of one Cove event under `dir`.
async fn to_events(
    e2b: &E2b,
    t: &Target,
    user: &str,
    dir: &str,
    include_entry: bool,
    ev: FileEvent,
) -> Vec<FilesystemEvent> {
    let rel = |p: &str| -> Option<String> {
        let prefix = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        p.strip_prefix(&prefix).map(str::to_string)
    };
    let mut out = Vec::new();
    let named = |kind: &'static str, name: String| FilesystemEvent {
        name,
        kind,
        entry: None,
    };
    match ev.event {
        FileEventKind::Overflow => return out,
        FileEventKind::Rename if ev.from.as_deref().is_some_and(is_upload_temp) => {
            if let Some(new) = rel(&ev.path) {
                for kind in ["EVENT_TYPE_CREATE", "EVENT_TYPE_CHMOD", "EVENT_TYPE_WRITE"] {
                    out.push(named(kind, new.clone()));
                }
            }
        }
        _ if is_upload_temp(&ev.path) => return out,
        FileEventKind::Rename => {
            if let Some(old) = ev.from.as_deref().and_then(rel) {
                out.push(named("EVENT_TYPE_RENAME", old));
            }
            if let Some(new) = rel(&ev.path) {
                out.push(named("EVENT_TYPE_CREATE", new));
            }
        }
        kind => {
            let Some(name) = rel(&ev.path) else {
                return out;
            };
            let k = match kind {
                FileEventKind::Create => "EVENT_TYPE_CREATE",
                FileEventKind::Write => "EVENT_TYPE_WRITE",
                FileEventKind::Remove => "EVENT_TYPE_REMOVE",
                FileEventKind::Chmod => "EVENT_TYPE_CHMOD",
                _ => "EVENT_TYPE_UNSPECIFIED",
            };
            out.push(named(k, name));
        }
    }
    if include_entry {
        for e in &mut out {
            if matches!(
                e.kind,
                "EVENT_TYPE_CREATE" | "EVENT_TYPE_WRITE" | "EVENT_TYPE_CHMOD"
            ) {
                e.entry = entry(e2b, t, user, &format!("{dir}/{}", e.name)).await.ok();
            }
        }
    }
    out
}

/// `POST /filesystem.Filesystem/WatchDir` (server stream): `start`, then events and
/// keepalives, until `Connect-Timeout-Ms` ends it with `deadline_exceeded`.
pub async fn watch_dir(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let req: WatchRequest = stream_request(body).await?;
        let (user, dir, mut batches) = open(&e2b, &t, &headers, &req).await?;
        let keepalive = keepalive_interval(&headers);
        let deadline = connect_timeout(&headers).map(|d| tokio::time::Instant::now() + d);
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        // The stream outlives the handler: it keeps the request's caller.
        tokio::spawn(carried(async move {
            if tx
                .send(message_frame(&WatchDirMessage::Start {}))
                .await
                .is_err()
            {
                return;
            }
            loop {
                let wait = match deadline {
                    Some(d) => {
                        keepalive.min(d.saturating_duration_since(tokio::time::Instant::now()))
                    }
                    None => keepalive,
                };
                if wait.is_zero() {
                    let err = ConnectError::new(ConnectCode::DeadlineExceeded, "watch timed out");
                    let _ = tx.send(end_frame(Some(&err))).await;
                    return;
                }
                let frames = match tokio::time::timeout(wait, batches.next()).await {
                    Err(_) => {
                        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                            continue;
                        }
                        vec![message_frame(&WatchDirMessage::Keepalive {})]
                    }
                    Ok(Some(Ok(batch))) => {
                        let mut frames = Vec::new();
                        for ev in batch {
                            for fe in to_events(&e2b, &t, &user, &dir, req.include_entry, ev).await
                            {
                                frames.push(message_frame(&WatchDirMessage::Filesystem(Box::new(
                                    fe,
                                ))));
                            }
                        }
                        frames
                    }
                    Ok(Some(Err(e))) => {
                        let _ = tx.send(end_frame(Some(&ConnectError::from(e)))).await;
                        return;
                    }
                    Ok(None) => {
                        let _ = tx.send(end_frame(None)).await;
                        return;
                    }
                };
                for f in frames {
                    if tx.send(f).await.is_err() {
                        return;
                    }
                }
            }
        }));
        Ok::<_, ConnectError>(stream_response(futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|b| (b, rx)) },
        )))
    };
    run.await.unwrap_or_else(stream_error)
}

/// `POST /filesystem.Filesystem/CreateWatcher`: starts a polled watcher.
pub async fn create_watcher(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let run = async {
        let req: WatchRequest = unary_request(&body)?;
        let (user, dir, mut batches) = open(&e2b, &t, &headers, &req).await?;
        let id = format!(
            "w{}",
            cove_domain::ids::new_operation_id().trim_start_matches("op-")
        );
        let events: Arc<Mutex<Vec<FilesystemEvent>>> = Arc::default();
        let buf = events.clone();
        let (e2, t2) = (e2b.clone(), t.clone());
        // The watcher outlives the request: it keeps the request's caller.
        let task = tokio::spawn(carried(async move {
            while let Some(Ok(batch)) = batches.next().await {
                for ev in batch {
                    let mapped = to_events(&e2, &t2, &user, &dir, req.include_entry, ev).await;
                    let mut b = buf.lock();
                    b.extend(mapped);
                    let over = b.len().saturating_sub(MAX_BUFFERED_EVENTS);
                    b.drain(..over);
                }
            }
        }));
        e2b.watchers.lock().insert(
            id.clone(),
            Watcher {
                sandbox: t.cove_id.clone(),
                events,
                task,
            },
        );
        Ok::<_, ConnectError>(unary_response(&CreateWatcherResponse { watcher_id: id }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn unknown_watcher(id: &str) -> ConnectError {
    ConnectError::new(
        ConnectCode::NotFound,
        format!("watcher with id {id} not found"),
    )
}

/// `POST /filesystem.Filesystem/GetWatcherEvents`: the events since the last call.
pub async fn get_watcher_events(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: WatcherRequest = unary_request(&body)?;
        // Events are read by a task; give the guest's latest batch a moment to arrive.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let w = e2b.watchers.lock();
        let Some(w) = w.get(&req.watcher_id).filter(|w| w.sandbox == t.cove_id) else {
            return Err(unknown_watcher(&req.watcher_id));
        };
        let events: Vec<FilesystemEvent> = std::mem::take(&mut *w.events.lock());
        Ok(unary_response(&WatcherEvents { events }))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /filesystem.Filesystem/RemoveWatcher`.
pub async fn remove_watcher(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: WatcherRequest = unary_request(&body)?;
        let mut w = e2b.watchers.lock();
        match w.get(&req.watcher_id) {
            Some(found) if found.sandbox == t.cove_id => {}
            _ => return Err(unknown_watcher(&req.watcher_id)),
        }
        if let Some(found) = w.remove(&req.watcher_id) {
            found.task.abort();
        }
        Ok(unary_response(&Empty {}))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

impl Watchers {
    /// Stops every watcher of a sandbox (it is gone).
    pub fn forget_sandbox(&self, sandbox: &str) {
        self.lock().retain(|_, w| {
            let keep = w.sandbox != sandbox;
            if !keep {
                w.task.abort();
            }
            keep
        });
    }
}
