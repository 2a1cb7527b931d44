//! [`NodeService`]: serves a node agent's [`NodeApi`] to a control plane.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cove_domain::EgressPolicy;
use cove_node_api::{
    AttachEvent, ByteStream, NodeApi, NodeError, PortRequest, PtySize, SandboxLaunch, SandboxPath,
    SpawnRequest, VolumeEntryAttrs, WatchRequest, WriteFileRequest,
};
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::pb::node_server::{Node, NodeServer};
use crate::pb::{upload, Call, Item, Reply, Upload};
use crate::wire::{args, check_call, check_token, encode};
use crate::{BuildItem, Method, CHUNK_BYTES, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};

/// A stream of items to the caller.
type Items = Pin<Box<dyn Stream<Item = Result<Item, Status>> + Send + 'static>>;

/// Serves a node (any [`NodeApi`]) over gRPC; every call must carry `token` as a bearer.
#[derive(Clone)]
pub struct NodeService {
    node: Arc<dyn NodeApi>,
    token: Arc<str>,
    version: u32,
}

impl NodeService {
    /// Serves `node` to callers that present `token`.
    pub fn new(node: Arc<dyn NodeApi>, token: &str) -> Self {
        NodeService {
            node,
            token: token.into(),
            version: PROTOCOL_VERSION,
        }
    }

    /// Serves as a node of an older protocol `version` would: it announces that version and
    /// refuses the methods newer than it (tests of mixed versions; at most [`PROTOCOL_VERSION`]).
    #[doc(hidden)]
    pub fn speaking(mut self, version: u32) -> Self {
        self.version = version.min(PROTOCOL_VERSION);
        self
    }

    /// The tonic service, ready for `tonic::transport::Server::add_service`.
    pub fn into_server(self) -> NodeServer<NodeService> {
        NodeServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn open(&self, req: &Request<Call>) -> Result<Method, Status> {
        check_token(req, &self.token)?;
        let call = req.get_ref();
        self.method(call)
    }

    /// The call's method, when its caller's version carries it and so does ours.
    fn method(&self, call: &Call) -> Result<Method, Status> {
        let method = check_call(call.version, call.method)?;
        method
            .check(self.version)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(method)
    }

    /// A unary reply carrying our version (the caller's handshake reads it).
    fn reply<T: serde::Serialize>(
        &self,
        result: Result<T, NodeError>,
    ) -> Result<Response<Reply>, Status> {
        Ok(Response::new(Reply {
            result: encode(&result),
            version: self.version,
        }))
    }
}

/// An item carrying a result and no bytes.
fn item<T: serde::Serialize>(result: &Result<T, NodeError>) -> Result<Item, Status> {
    Ok(Item {
        result: encode(result),
        data: Vec::new(),
    })
}

/// An item carrying only bytes.
fn data_item(data: Bytes) -> Result<Item, Status> {
    Ok(Item {
        result: Vec::new(),
        data: data.to_vec(),
    })
}

/// The items of a stream that opened: an `Ok(())` acknowledgement first, then `rest`.
fn opened(rest: impl Stream<Item = Result<Item, Status>> + Send + 'static) -> Items {
    Box::pin(futures::stream::once(async { item(&Ok::<(), NodeError>(())) }).chain(rest))
}

/// A stream that failed to open: one `Err` item.
fn failed(e: NodeError) -> Items {
    Box::pin(futures::stream::once(async move {
        item(&Err::<(), NodeError>(e))
    }))
}

/// Uploaded bytes after the call, as a byte stream for the node.
fn body(rest: Streaming<Upload>) -> ByteStream {
    Box::pin(rest.filter_map(|m| async move {
        match m {
            Ok(Upload {
                part: Some(upload::Part::Data(d)),
            }) => Some(Ok(Bytes::from(d))),
            Ok(_) => None,
            Err(s) => Some(Err(std::io::Error::other(s.message().to_string()))),
        }
    }))
}

async fn first_call(stream: &mut Streaming<Upload>) -> Result<Call, Status> {
    match stream.message().await? {
        Some(Upload {
            part: Some(upload::Part::Call(call)),
        }) => Ok(call),
        _ => Err(Status::invalid_argument(
            "the first message must be the call",
        )),
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn unary(&self, req: Request<Call>) -> Result<Response<Reply>, Status> {
        let method = self.open(&req)?;
        let a = req.into_inner().args;
        let n = &self.node;
        match method {
            Method::Recipes => self.reply(Ok(n.recipes())),
            Method::RemoveRelease => {
                let (t, num): (String, u32) = args(&a)?;
                self.reply(n.remove_release(&t, num).await)
            }
            Method::RemoveStoredRelease => {
                let (digest,): (String,) = args(&a)?;
                self.reply(n.remove_stored_release(&digest).await)
            }
            Method::StartSandbox => {
                let (launch,): (SandboxLaunch,) = args(&a)?;
                // Runs to its end even when the caller goes away (a control-plane replica that
                // died): the replica that takes the create over then adopts a whole sandbox
                // instead of finding half of one.
                let node = n.clone();
                let started = tokio::spawn(async move { node.start_sandbox(launch).await })
                    .await
                    .unwrap_or_else(|e| Err(NodeError::Internal(format!("start task: {e}"))));
                self.reply(started)
            }
            Method::AdoptSandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.adopt_sandbox(&id).await)
            }
            Method::InspectSandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.inspect_sandbox(&id).await)
            }
            Method::FailureReason => {
                let (id,): (String,) = args(&a)?;
                self.reply(Ok(n.failure_reason(&id).await))
            }
            Method::CheckAgent => {
                let (id, ms): (String, u64) = args(&a)?;
                self.reply(n.check_agent(&id, Duration::from_millis(ms)).await)
            }
            Method::RepairSandbox => {
                let (launch,): (SandboxLaunch,) = args(&a)?;
                self.reply(n.repair_sandbox(launch).await)
            }
            Method::PauseSandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.pause_sandbox(&id).await)
            }
            Method::ResumeSandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.resume_sandbox(&id).await)
            }
            Method::SuspendSandbox => {
                let (id,): (String,) = args(&a)?;
                // Cancelled when the caller goes away (the handler is dropped).
                let cancel = CancellationToken::new();
                let _guard = cancel.clone().drop_guard();
                self.reply(n.suspend_sandbox(&id, cancel).await)
            }
            Method::WakeSandbox => {
                let (launch,): (SandboxLaunch,) = args(&a)?;
                let cancel = CancellationToken::new();
                let _guard = cancel.clone().drop_guard();
                self.reply(n.wake_sandbox(launch, cancel).await)
            }
            Method::ReleaseSandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.release_sandbox(&id).await)
            }
            Method::DestroySandbox => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.destroy_sandbox(&id).await)
            }
            Method::ListSandboxes => self.reply(n.list_sandboxes().await),
            Method::HasSnapshot => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.has_snapshot(&id).await)
            }
            Method::DeleteSnapshot => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.delete_snapshot(&id).await)
            }
            Method::ListSnapshots => self.reply(n.list_snapshots().await),
            Method::SweepSnapshots => self.reply(n.sweep_snapshots().await),
            Method::Capabilities => self.reply(Ok(n.capabilities())),
            Method::Spawn => {
                let (sid, spawn): (String, SpawnRequest) = args(&a)?;
                self.reply(n.spawn(&sid, spawn).await)
            }
            Method::Command => {
                let (sid, cid): (String, String) = args(&a)?;
                self.reply(n.command(&sid, &cid).await)
            }
            Method::Commands => {
                let (sid,): (String,) = args(&a)?;
                self.reply(n.commands(&sid).await)
            }
            Method::Signal => {
                let (sid, cid, sig): (String, String, i32) = args(&a)?;
                self.reply(n.signal(&sid, &cid, sig).await)
            }
            Method::Kill => {
                let (sid, cid, grace): (String, String, u64) = args(&a)?;
                self.reply(n.kill(&sid, &cid, grace).await)
            }
            Method::StdinWrite => {
                let (sid, cid, data): (String, String, Vec<u8>) = args(&a)?;
                self.reply(n.stdin_write(&sid, &cid, Bytes::from(data)).await)
            }
            Method::StdinClose => {
                let (sid, cid): (String, String) = args(&a)?;
                self.reply(n.stdin_close(&sid, &cid).await)
            }
            Method::Resize => {
                let (sid, cid, size): (String, String, PtySize) = args(&a)?;
                self.reply(n.resize(&sid, &cid, size).await)
            }
            Method::Forget => {
                let (sid, cid): (String, String) = args(&a)?;
                self.reply(n.forget(&sid, &cid).await)
            }
            Method::Stat => {
                let (sid, path, user): (String, SandboxPath, Option<String>) = args(&a)?;
                self.reply(n.stat(&sid, path, user).await)
            }
            Method::ListDir => {
                let (sid, path, user, depth): (String, SandboxPath, Option<String>, u32) =
                    args(&a)?;
                self.reply(n.list_dir(&sid, path, user, depth).await)
            }
            Method::MakeDir => {
                let (sid, path, user): (String, SandboxPath, Option<String>) = args(&a)?;
                self.reply(n.make_dir(&sid, path, user).await)
            }
            Method::Remove => {
                let (sid, path, user): (String, SandboxPath, Option<String>) = args(&a)?;
                self.reply(n.remove(&sid, path, user).await)
            }
            Method::Rename => {
                let (sid, from, to, user): (String, SandboxPath, SandboxPath, Option<String>) =
                    args(&a)?;
                self.reply(n.rename(&sid, from, to, user).await)
            }
            Method::SetXattrs => {
                let (sid, set): (String, cove_node_api::SetXattrsRequest) = args(&a)?;
                self.reply(n.set_xattrs(&sid, set).await)
            }
            Method::Xattrs => {
                let (sid, get): (String, cove_node_api::XattrsRequest) = args(&a)?;
                self.reply(n.xattrs(&sid, get).await)
            }
            Method::Capacity => self.reply(n.capacity().await),
            Method::SandboxMetrics => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.sandbox_metrics(&id).await)
            }
            Method::SandboxNetwork => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.sandbox_network(&id).await)
            }
            Method::SetSandboxNetwork => {
                let (id, policy): (String, EgressPolicy) = args(&a)?;
                self.reply(n.set_sandbox_network(&id, policy).await)
            }
            Method::RearmSecrets => {
                let (id, secrets): (String, BTreeMap<String, cove_node_api::LaunchSecret>) =
                    args(&a)?;
                self.reply(n.rearm_secrets(&id, secrets).await)
            }
            Method::CachedReleases => self.reply(n.cached_releases().await),
            Method::CheckpointSandbox => {
                let (id, ck): (String, String) = args(&a)?;
                // Cancelled when the caller goes away: nothing of the checkpoint is kept.
                let cancel = CancellationToken::new();
                let _guard = cancel.clone().drop_guard();
                self.reply(n.checkpoint_sandbox(&id, &ck, cancel).await)
            }
            Method::RestoreCheckpoint => {
                let (launch, ck): (SandboxLaunch, String) = args(&a)?;
                let cancel = CancellationToken::new();
                let _guard = cancel.clone().drop_guard();
                self.reply(n.restore_checkpoint(launch, &ck, cancel).await)
            }
            Method::DeleteCheckpoint => {
                let (ck,): (String,) = args(&a)?;
                self.reply(n.delete_checkpoint(&ck).await)
            }
            Method::CreateVolume => {
                let (id, size_mib): (String, u64) = args(&a)?;
                self.reply(n.create_volume(&id, size_mib).await)
            }
            Method::DeleteVolume => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.delete_volume(&id).await)
            }
            Method::VolumeUsage => {
                let (id,): (String,) = args(&a)?;
                self.reply(n.volume_usage(&id).await)
            }
            Method::ListVolumeDir => {
                let (id, path, depth): (String, String, u32) = args(&a)?;
                self.reply(n.list_volume_dir(&id, path, depth).await)
            }
            Method::StatVolumePath => {
                let (id, path): (String, String) = args(&a)?;
                self.reply(n.stat_volume_path(&id, path).await)
            }
            Method::RemoveVolumePath => {
                let (id, path): (String, String) = args(&a)?;
                self.reply(n.remove_volume_path(&id, path).await)
            }
            Method::MakeVolumeDir => {
                let (id, path, parents, attrs): (String, String, bool, VolumeEntryAttrs) =
                    args(&a)?;
                self.reply(n.make_volume_dir(&id, path, parents, attrs).await)
            }
            Method::SetVolumeAttrs => {
                let (id, path, attrs): (String, String, VolumeEntryAttrs) = args(&a)?;
                self.reply(n.set_volume_attrs(&id, path, attrs).await)
            }
            Method::DownloadVolume => {
                let (id, size_mib, generation): (String, u64, u64) = args(&a)?;
                self.reply(n.download_volume(&id, size_mib, generation).await)
            }
            Method::UploadVolume => {
                let (id, generation): (String, u64) = args(&a)?;
                self.reply(n.upload_volume(&id, generation).await)
            }
            Method::AttachVolumes => {
                let (id, volumes): (String, Vec<cove_node_api::LaunchVolume>) = args(&a)?;
                self.reply(n.attach_volumes(&id, volumes).await)
            }
            Method::ReleaseVolume => {
                let (id, keep): (String, u64) = args(&a)?;
                self.reply(n.release_volume(&id, keep).await)
            }
            _ => Err(Status::unimplemented("not a unary method")),
        }
    }

    type ServerStreamStream = Items;

    async fn server_stream(&self, req: Request<Call>) -> Result<Response<Items>, Status> {
        let method = self.open(&req)?;
        let a = req.into_inner().args;
        let n = self.node.clone();
        let items: Items = match method {
            Method::BuildRelease => {
                let (t, num, no_cache): (String, u32, bool) = args(&a)?;
                build(move |events, cancel| async move {
                    n.build_release(&t, num, no_cache, events, cancel).await
                })
            }
            Method::BuildFileRelease => {
                let (t, num, file): (String, u32, cove_node_api::FileBuild) = args(&a)?;
                build(move |events, cancel| async move {
                    n.build_file_release(&t, num, file, events, cancel).await
                })
            }
            Method::Attach => {
                let (sid, cid, offset, follow): (String, String, u64, bool) = args(&a)?;
                match n.attach(&sid, &cid, offset, follow).await {
                    Ok(events) => opened(events.map(|ev| match ev {
                        Ok(AttachEvent::Output {
                            offset,
                            stream,
                            data,
                        }) => Ok(Item {
                            result: encode(&Ok::<_, NodeError>(AttachEvent::Output {
                                offset,
                                stream,
                                data: Bytes::new(),
                            })),
                            data: data.to_vec(),
                        }),
                        other => item(&other),
                    })),
                    Err(e) => failed(e),
                }
            }
            Method::ReadFile => {
                let (sid, path, user, offset, length): (
                    String,
                    SandboxPath,
                    Option<String>,
                    u64,
                    Option<u64>,
                ) = args(&a)?;
                match n.read_file(&sid, path, user, offset, length).await {
                    Ok((info, bytes)) => Box::pin(
                        futures::stream::once(async move { item(&Ok::<_, NodeError>(info)) })
                            .chain(bytes.map(|b| match b {
                                Ok(b) => data_item(b),
                                Err(e) => item(&Err::<(), _>(e)),
                            })),
                    ),
                    Err(e) => failed(e),
                }
            }
            Method::ReadVolumeFile => {
                let (id, path): (String, String) = args(&a)?;
                match n.read_volume_file(&id, path).await {
                    Ok((info, bytes)) => Box::pin(
                        futures::stream::once(async move { item(&Ok::<_, NodeError>(info)) })
                            .chain(bytes.map(|b| match b {
                                Ok(b) => data_item(b),
                                Err(e) => item(&Err::<(), _>(e)),
                            })),
                    ),
                    Err(e) => failed(e),
                }
            }
            Method::Watch => {
                let (sid, watch): (String, WatchRequest) = args(&a)?;
                match n.watch(&sid, watch).await {
                    Ok(events) => opened(events.map(|batch| item(&batch))),
                    Err(e) => failed(e),
                }
            }
            Method::ExportCheckpoint => {
                let (ck, header): (String, Vec<u8>) = args(&a)?;
                match n.export_checkpoint(&ck, Bytes::from(header)).await {
                    // In chunks: an archive's reader may hand out pieces past a message's limit.
                    Ok(bytes) => opened(bytes.flat_map(|b| {
                        let items: Vec<_> = match b {
                            Ok(b) => (0..b.len())
                                .step_by(CHUNK_BYTES)
                                .map(|i| data_item(b.slice(i..b.len().min(i + CHUNK_BYTES))))
                                .collect(),
                            Err(e) => {
                                vec![item(&Err::<(), _>(NodeError::Internal(e.to_string())))]
                            }
                        };
                        futures::stream::iter(items)
                    })),
                    Err(e) => failed(e),
                }
            }
            Method::NetworkDenials => {
                Box::pin(n.network_denials().map(|d| item(&Ok::<_, NodeError>(d))))
            }
            _ => return Err(Status::unimplemented("not a server-streaming method")),
        };
        Ok(Response::new(items))
    }

    async fn client_stream(
        &self,
        req: Request<Streaming<Upload>>,
    ) -> Result<Response<Reply>, Status> {
        check_token(&req, &self.token)?;
        let mut stream = req.into_inner();
        let call = first_call(&mut stream).await?;
        match self.method(&call) {
            Ok(Method::WriteFile) => {
                let (sid, write): (String, WriteFileRequest) = args(&call.args)?;
                self.reply(self.node.write_file(&sid, write, body(stream)).await)
            }
            Ok(Method::WriteVolumeFile) => {
                let (id, path, attrs): (String, String, VolumeEntryAttrs) = args(&call.args)?;
                self.reply(
                    self.node
                        .write_volume_file(&id, path, attrs, body(stream))
                        .await,
                )
            }
            Ok(Method::ImportCheckpoint) => {
                let (ck, max_bytes): (String, u64) = args(&call.args)?;
                // Cancelled when the caller goes away: nothing of the import is kept.
                let cancel = CancellationToken::new();
                let _guard = cancel.clone().drop_guard();
                let imported = self
                    .node
                    .import_checkpoint(&ck, body(stream), max_bytes, cancel)
                    .await;
                self.reply(imported)
            }
            _ => Err(Status::unimplemented("not a client-streaming method")),
        }
    }

    type BidiStream = Items;

    async fn bidi(&self, req: Request<Streaming<Upload>>) -> Result<Response<Items>, Status> {
        check_token(&req, &self.token)?;
        let mut stream = req.into_inner();
        let call = first_call(&mut stream).await?;
        match self.method(&call) {
            Ok(Method::ForwardHttp) => {
                let (id, port_req): (String, PortRequest) = args(&call.args)?;
                let items: Items = match self.node.forward_http(&id, port_req, body(stream)).await {
                    Ok((head, bytes)) => Box::pin(
                        futures::stream::once(async move { item(&Ok::<_, NodeError>(head)) })
                            .chain(bytes.map(|b| match b {
                                Ok(b) => data_item(b),
                                Err(e) => item(&Err::<(), _>(NodeError::Internal(e.to_string()))),
                            })),
                    ),
                    Err(e) => failed(e),
                };
                Ok(Response::new(items))
            }
            _ => Err(Status::unimplemented("not a bidirectional method")),
        }
    }
}

/// A release build as items: each event, then the result. The build is cancelled when the
/// caller goes away.
fn build<T, F, Fut>(run: F) -> Items
where
    T: serde::Serialize + Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<cove_node_api::BuildEvent>, CancellationToken) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = Result<T, NodeError>> + Send,
{
    let (out, rx) = tokio::sync::mpsc::channel::<Result<Item, Status>>(64);
    tokio::spawn(async move {
        let cancel = CancellationToken::new();
        let (events, mut events_rx) = tokio::sync::mpsc::channel(64);
        let forward_out = out.clone();
        let forward = tokio::spawn(async move {
            while let Some(ev) = events_rx.recv().await {
                let it = item(&Ok::<_, NodeError>(BuildItem::<T>::Event(ev)));
                if forward_out.send(it).await.is_err() {
                    break;
                }
            }
        });
        let run = run(events, cancel.clone());
        tokio::pin!(run);
        let result = tokio::select! {
            r = &mut run => r,
            () = out.closed() => {
                cancel.cancel();
                run.await
            }
        };
        let _ = forward.await;
        let _ = out.send(item(&result.map(BuildItem::<T>::Done))).await;
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
