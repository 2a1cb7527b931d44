//! [`NodeService`]: serves a node agent's [`NodeApi`] to a control plane.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cove_node_api::{
    AttachEvent, ByteStream, NodeApi, NodeError, PortRequest, SandboxLaunch, SandboxPath,
    VolumeEntryAttrs, WatchRequest, WriteFileRequest,
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
        if let Some(result) = crate::contract::dispatch(&**n, method, &a).await {
            return Ok(Response::new(Reply {
                result: result?,
                version: self.version,
            }));
        }
        match method {
            Method::Recipes => self.reply(Ok(n.recipes())),
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
            Method::FailureReason => {
                let (id,): (String,) = args(&a)?;
                self.reply(Ok(n.failure_reason(&id).await))
            }
            Method::CheckAgent => {
                let (id, ms): (String, u64) = args(&a)?;
                self.reply(n.check_agent(&id, Duration::from_millis(ms)).await)
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
            Method::Capabilities => self.reply(Ok(n.capabilities())),
            Method::StdinWrite => {
                let (sid, cid, data): (String, String, Vec<u8>) = args(&a)?;
                self.reply(n.stdin_write(&sid, &cid, Bytes::from(data)).await)
            }
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
