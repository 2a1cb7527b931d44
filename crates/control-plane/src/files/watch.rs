//! Watching a directory: batches of change events from the guest, as API events.

use cove_api_types::{FileEvent, FileEventKind};
use cove_domain::validate;
use cove_node_api::{SandboxPath, WatchRequest};
use futures::stream::BoxStream;
use futures::StreamExt;

use super::{checked, text_and_b64, to_api_type};
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// How [`ControlPlane::watch_files`] watches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Watch every subdirectory too, including new ones (default false).
    pub recursive: bool,
}

impl ControlPlane {
    /// Starts watching a directory. Returns once the sandbox watches it (a missing path or a
    /// file is an error here); the stream yields events until the directory is removed, the
    /// sandbox stops answering (an error item), or the caller drops it, which ends the watch in
    /// the sandbox.
    pub async fn watch_files(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        options: WatchOptions,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, ServiceError>>, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let WatchOptions { recursive } = options;
        let user = user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        let path = checked("path", path)?;
        let req = WatchRequest {
            path,
            user: Some(user),
            recursive,
        };
        let id = sandbox_id.to_string();
        let events = self
            .node()
            .watch(sandbox_id, req)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        let cp = self.clone();
        Ok(events
            .map(move |batch| {
                cp.touch(&id);
                batch
                    .map(|b| b.into_iter().map(to_api_event).collect())
                    .map_err(|e| from_node(e, &id))
            })
            .boxed())
    }
}

fn to_api_event(e: cove_node_api::FileEvent) -> FileEvent {
    use cove_node_api::FileEventKind as G;
    let (path, path_b64) = text_and_b64(&e.path.0);
    let (from, from_b64) = match e.from {
        Some(f) => {
            let (s, b) = text_and_b64(&f.0);
            (Some(s), b)
        }
        None => (None, None),
    };
    FileEvent {
        event: match e.kind {
            G::Create => FileEventKind::Create,
            G::Write => FileEventKind::Write,
            G::Remove => FileEventKind::Remove,
            G::Rename => FileEventKind::Rename,
            G::Chmod => FileEventKind::Chmod,
            G::Overflow => FileEventKind::Overflow,
        },
        path,
        path_b64,
        file_type: to_api_type(e.file_type),
        from,
        from_b64,
    }
}
