//! A sandbox's files in a map (absolute path → entry), and `NodeFiles` over it. Users `root`
//! (home `/root`) and `user` (home `/home/user`) exist; relative paths resolve against the
//! user's home; `.` and `..` are resolved lexically. Errors are the ones the real guest
//! returns: a missing path is `FileNotFound`, a file where a directory is needed `WrongType`,
//! an unknown user `InvalidArgument { field: "user" }`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, FileEvent, FileEventKind, FileInfo, FileType, NodeError, NodeFiles, SandboxPath,
    SetXattrsRequest, WatchRequest, WriteFileRequest, XattrsRequest,
};
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::{Call, FakeNode, State};

/// One entry of a file tree.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    kind: Kind,
    mode: u32,
    owner: String,
    mtime_ms: i64,
}

#[derive(Debug, Clone)]
enum Kind {
    Dir,
    File(Bytes),
}

/// The files of one sandbox (or of its snapshot).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    entries: BTreeMap<Vec<u8>, Entry>,
}

/// A watch registered by `NodeFiles::watch`.
pub(crate) struct Watcher {
    sandbox_id: String,
    dir: Vec<u8>,
    recursive: bool,
    tx: mpsc::Sender<Result<Vec<FileEvent>, NodeError>>,
}

fn dir(owner: &str) -> Entry {
    Entry {
        kind: Kind::Dir,
        mode: 0o755,
        owner: owner.into(),
        mtime_ms: 0,
    }
}

/// The home directory of a known user.
pub(crate) fn home(user: &str) -> Result<&'static str, NodeError> {
    match user {
        "root" => Ok("/root"),
        "user" => Ok("/home/user"),
        other => Err(NodeError::InvalidArgument {
            field: "user".into(),
            message: format!("unknown user {other}"),
        }),
    }
}

/// `path` made absolute against `user`'s home, with `.`, `..` and repeated slashes resolved.
pub(crate) fn resolve(path: &[u8], user: &str) -> Result<Vec<u8>, NodeError> {
    let base = if path.starts_with(b"/") {
        Vec::new()
    } else {
        home(user)?.as_bytes().to_vec()
    };
    let joined = [base.as_slice(), b"/", path].concat();
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in joined.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = Vec::new();
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(out)
}

fn parent(path: &[u8]) -> Option<Vec<u8>> {
    if path == b"/" {
        return None;
    }
    let cut = path.iter().rposition(|b| *b == b'/')?;
    Some(if cut == 0 {
        b"/".to_vec()
    } else {
        path[..cut].to_vec()
    })
}

fn name(path: &[u8]) -> Vec<u8> {
    let cut = path.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1);
    path[cut..].to_vec()
}

/// Whether `path` is `dir` itself or below it.
fn under(path: &[u8], dir: &[u8]) -> bool {
    path == dir || dir == b"/" || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

fn shown(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

fn not_found(path: &[u8]) -> NodeError {
    NodeError::FileNotFound(format!("{}: no such file or directory", shown(path)))
}

fn wrong_type(field: &str, path: &[u8], what: &str) -> NodeError {
    NodeError::WrongType {
        field: field.into(),
        message: format!("{} {what}", shown(path)),
    }
}

impl Tree {
    /// The directories every fresh sandbox has, plus `workdir`.
    pub(crate) fn seeded(workdir: &str) -> Tree {
        let mut t = Tree::default();
        for (d, owner) in [
            ("/", "root"),
            ("/root", "root"),
            ("/home", "root"),
            ("/home/user", "user"),
            ("/tmp", "root"),
        ] {
            t.entries.insert(d.as_bytes().to_vec(), dir(owner));
        }
        if let Ok(w) = resolve(workdir.as_bytes(), "root") {
            let _ = t.make_dirs(&w, "root", 0);
        }
        t
    }

    /// Bytes of file content (what a snapshot saves).
    pub(crate) fn file_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| match &e.kind {
                Kind::File(b) => b.len() as u64,
                Kind::Dir => 0,
            })
            .sum()
    }

    fn info(&self, path: &[u8]) -> Result<FileInfo, NodeError> {
        let e = self.entries.get(path).ok_or_else(|| not_found(path))?;
        let (file_type, size) = match &e.kind {
            Kind::Dir => (FileType::Dir, 4096),
            Kind::File(b) => (FileType::File, b.len() as u64),
        };
        Ok(FileInfo {
            name: SandboxPath(name(path)),
            path: SandboxPath(path.to_vec()),
            file_type,
            size,
            mode: e.mode,
            owner: e.owner.clone(),
            group: e.owner.clone(),
            mtime_ms: e.mtime_ms,
            symlink_target: None,
        })
    }

    /// Whether `path` is a directory (`FileNotFound` when missing).
    pub(crate) fn is_dir(&self, path: &[u8]) -> Result<bool, NodeError> {
        match self.entries.get(path) {
            Some(e) => Ok(matches!(e.kind, Kind::Dir)),
            None => Err(not_found(path)),
        }
    }

    /// `mkdir -p`; an existing file on the way is `WrongType` (`AlreadyExists` at the end).
    fn make_dirs(&mut self, path: &[u8], owner: &str, now: i64) -> Result<(), NodeError> {
        let mut chain = vec![path.to_vec()];
        while let Some(p) = chain.last().and_then(|p| parent(p)) {
            chain.push(p);
        }
        for (i, p) in chain.iter().rev().enumerate() {
            match self.entries.get(p).map(|e| &e.kind) {
                Some(Kind::Dir) => {}
                Some(Kind::File(_)) if i + 1 == chain.len() => {
                    return Err(NodeError::AlreadyExists(format!(
                        "{} exists and is not a directory",
                        shown(p)
                    )))
                }
                Some(Kind::File(_)) => return Err(wrong_type("path", p, "is not a directory")),
                None => {
                    let mut d = dir(owner);
                    d.mtime_ms = now;
                    self.entries.insert(p.clone(), d);
                }
            }
        }
        Ok(())
    }

    /// Entries under `dir`, in name order, each directory's contents right after it.
    fn walk(&self, dir: &[u8], depth: u32, out: &mut Vec<FileInfo>) -> Result<(), NodeError> {
        let children: Vec<Vec<u8>> = self
            .entries
            .keys()
            .filter(|k| k.as_slice() != dir && parent(k).as_deref() == Some(dir))
            .cloned()
            .collect();
        for child in children {
            out.push(self.info(&child)?);
            if depth > 1 && self.is_dir(&child)? {
                self.walk(&child, depth - 1, out)?;
            }
        }
        Ok(())
    }
}

/// Sends `events` of sandbox `id` to the watchers that see them (a full watcher misses them).
fn notify(st: &mut State, id: &str, events: Vec<FileEvent>) {
    st.watchers.retain(|w| !w.tx.is_closed());
    for w in &st.watchers {
        if w.sandbox_id != id {
            continue;
        }
        let seen: Vec<FileEvent> = events
            .iter()
            .filter(|e| {
                let p = e.path.as_bytes();
                if w.recursive {
                    under(p, &w.dir) && p != w.dir.as_slice()
                } else {
                    parent(p).as_deref() == Some(w.dir.as_slice())
                }
            })
            .cloned()
            .collect();
        if !seen.is_empty() {
            let _ = w.tx.try_send(Ok(seen));
        }
    }
}

fn event(kind: FileEventKind, path: &[u8], file_type: FileType) -> FileEvent {
    FileEvent {
        kind,
        path: SandboxPath(path.to_vec()),
        file_type,
        from: None,
    }
}

/// Most events a watch buffers before it misses some.
const WATCH_BUFFER: usize = 64;

fn user_of(user: Option<String>) -> String {
    user.unwrap_or_else(|| "user".into())
}

#[async_trait]
impl NodeFiles for FakeNode {
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        // The body is read before the call takes effect, as the real node streams it first.
        let mut data = Vec::new();
        let mut body = body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| NodeError::Internal(format!("body: {e}")))?;
            data.extend_from_slice(&chunk);
            if req.max_bytes.is_some_and(|m| data.len() as u64 > m) {
                return Err(NodeError::TooLarge(format!(
                    "the file is larger than {} bytes",
                    req.max_bytes.unwrap_or_default()
                )));
            }
        }
        self.run(Call::WriteFile, sandbox_id, None, move |st| {
            let now = st.tick() as i64;
            let user = user_of(req.user);
            let path = resolve(req.path.as_bytes(), &user)?;
            let sb = st.serving(sandbox_id)?;
            let existing = sb.files.entries.get(&path).cloned();
            if matches!(existing.as_ref().map(|e| &e.kind), Some(Kind::Dir)) {
                return Err(wrong_type("path", &path, "is a directory"));
            }
            if let Some(p) = parent(&path) {
                sb.files.make_dirs(&p, &user, now)?;
            }
            let mode = req
                .mode
                .or(existing.as_ref().map(|e| e.mode))
                .unwrap_or(0o644);
            sb.files.entries.insert(
                path.clone(),
                Entry {
                    kind: Kind::File(Bytes::from(data)),
                    mode,
                    owner: user,
                    mtime_ms: now,
                },
            );
            let info = sb.files.info(&path)?;
            let kind = if existing.is_some() {
                FileEventKind::Write
            } else {
                FileEventKind::Create
            };
            notify(st, sandbox_id, vec![event(kind, &path, FileType::File)]);
            Ok(info)
        })
        .await
    }

    async fn read_file(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        self.run(Call::ReadFile, sandbox_id, None, move |st| {
            let path = resolve(path.as_bytes(), &user_of(user))?;
            let sb = st.serving(sandbox_id)?;
            let info = sb.files.info(&path)?;
            let Some(Kind::File(data)) = sb.files.entries.get(&path).map(|e| &e.kind) else {
                return Err(wrong_type("path", &path, "is a directory"));
            };
            let start = (offset as usize).min(data.len());
            let end = length.map_or(data.len(), |l| (start + l as usize).min(data.len()));
            let chunk = data.slice(start..end);
            let stream = futures::stream::iter([Ok(chunk)]).boxed();
            Ok((info, stream))
        })
        .await
    }

    async fn stat(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.run(Call::Stat, sandbox_id, None, move |st| {
            let path = resolve(path.as_bytes(), &user_of(user))?;
            st.serving(sandbox_id)?.files.info(&path)
        })
        .await
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError> {
        self.run(Call::ListDir, sandbox_id, None, move |st| {
            let path = resolve(path.as_bytes(), &user_of(user))?;
            let files = &st.serving(sandbox_id)?.files;
            if !files.is_dir(&path)? {
                return Err(wrong_type("path", &path, "is not a directory"));
            }
            let mut out = Vec::new();
            files.walk(&path, depth.max(1), &mut out)?;
            Ok(out)
        })
        .await
    }

    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.run(Call::MakeDir, sandbox_id, None, move |st| {
            let now = st.tick() as i64;
            let user = user_of(user);
            let path = resolve(path.as_bytes(), &user)?;
            let sb = st.serving(sandbox_id)?;
            let existed = sb.files.entries.contains_key(&path);
            sb.files.make_dirs(&path, &user, now)?;
            let info = sb.files.info(&path)?;
            if !existed {
                notify(
                    st,
                    sandbox_id,
                    vec![event(FileEventKind::Create, &path, FileType::Dir)],
                );
            }
            Ok(info)
        })
        .await
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), NodeError> {
        self.run(Call::Remove, sandbox_id, None, move |st| {
            let path = resolve(path.as_bytes(), &user_of(user))?;
            let sb = st.serving(sandbox_id)?;
            let file_type = sb.files.info(&path)?.file_type;
            if path == b"/" {
                return Err(NodeError::PermissionDenied("cannot remove /".into()));
            }
            sb.files.entries.retain(|k, _| !under(k, &path));
            notify(
                st,
                sandbox_id,
                vec![event(FileEventKind::Remove, &path, file_type)],
            );
            Ok(())
        })
        .await
    }

    async fn rename(
        &self,
        sandbox_id: &str,
        from: SandboxPath,
        to: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.run(Call::Rename, sandbox_id, None, move |st| {
            let user = user_of(user);
            let from = resolve(from.as_bytes(), &user)?;
            let to = resolve(to.as_bytes(), &user)?;
            let sb = st.serving(sandbox_id)?;
            let file_type = sb.files.info(&from)?.file_type;
            let to_parent = parent(&to).ok_or_else(|| wrong_type("to", &to, "is the root"))?;
            if !sb.files.is_dir(&to_parent)? {
                return Err(wrong_type("to", &to_parent, "is not a directory"));
            }
            if under(&to, &from) {
                return Err(NodeError::InvalidArgument {
                    field: "to".into(),
                    message: "cannot move a directory into itself".into(),
                });
            }
            let moved: Vec<(Vec<u8>, Entry)> = sb
                .files
                .entries
                .iter()
                .filter(|(k, _)| under(k, &from))
                .map(|(k, e)| ([to.as_slice(), &k[from.len()..]].concat(), e.clone()))
                .collect();
            sb.files.entries.retain(|k, _| !under(k, &from));
            sb.files.entries.retain(|k, _| !under(k, &to));
            sb.files.entries.extend(moved);
            let info = sb.files.info(&to)?;
            let mut ev = event(FileEventKind::Rename, &to, file_type);
            ev.from = Some(SandboxPath(from));
            notify(st, sandbox_id, vec![ev]);
            Ok(info)
        })
        .await
    }

    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError> {
        self.run(Call::Watch, sandbox_id, None, move |st| {
            let path = resolve(req.path.as_bytes(), &user_of(req.user))?;
            let files = &st.serving(sandbox_id)?.files;
            if !files.is_dir(&path)? {
                return Err(wrong_type("path", &path, "is not a directory"));
            }
            let (tx, rx) = mpsc::channel(WATCH_BUFFER);
            st.watchers.push(Watcher {
                sandbox_id: sandbox_id.to_string(),
                dir: path,
                recursive: req.recursive,
                tx,
            });
            Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
        })
        .await
    }

    /// The fake keeps no extended attributes: `Unsupported`, as a node without them answers.
    async fn set_xattrs(&self, _sandbox_id: &str, _req: SetXattrsRequest) -> Result<(), NodeError> {
        Err(NodeError::Unsupported(
            "the fake node keeps no extended attributes".into(),
        ))
    }

    /// See [`FakeNode::set_xattrs`].
    async fn xattrs(
        &self,
        _sandbox_id: &str,
        _req: XattrsRequest,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, NodeError> {
        Err(NodeError::Unsupported(
            "the fake node keeps no extended attributes".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_the_users_home() {
        assert_eq!(
            resolve(b"a/b", "user").ok(),
            Some(b"/home/user/a/b".to_vec())
        );
        assert_eq!(
            resolve(b"/x/../y/./z/", "root").ok(),
            Some(b"/y/z".to_vec())
        );
        assert_eq!(resolve(b"/..", "root").ok(), Some(b"/".to_vec()));
        assert!(matches!(
            resolve(b"a", "nobody"),
            Err(NodeError::InvalidArgument { field, .. }) if field == "user"
        ));
    }

    #[test]
    fn parents_names_and_subtrees() {
        assert_eq!(parent(b"/a/b"), Some(b"/a".to_vec()));
        assert_eq!(parent(b"/a"), Some(b"/".to_vec()));
        assert_eq!(parent(b"/"), None);
        assert_eq!(name(b"/a/b"), b"b".to_vec());
        assert!(under(b"/a/b", b"/a"));
        assert!(!under(b"/ab", b"/a"));
    }
}
