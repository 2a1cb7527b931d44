//! [`RemoteNode`]: the control plane's side of a remote node agent. It implements every trait
//! of [`cove_node_api::NodeApi`] over a gRPC channel, so the control plane uses it exactly like
//! the in-process node.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use cove_domain::EgressPolicy;
use cove_node_api::{
    AgentHealth, AttachEvent, BuildEvent, BuiltRelease, ByteStream, CommandInfo, FileEvent,
    FileInfo, LaunchSecret, NetworkDenied, NodeCapabilities, NodeCapacity, NodeCommands, NodeError,
    NodeFiles, NodeLifecycle, NodeMetrics, NodeNetwork, NodeReleases, NodeSandboxState,
    PortRequest, PortResponse, PtySize, RecipeInfo, ReleaseRef, RepairInfo, SandboxLaunch,
    SandboxMetrics, SandboxNetworkInfo, SandboxPath, SetXattrsRequest, SpawnRequest, SuspendInfo,
    WakeInfo, WatchRequest, WriteFileRequest, XattrsRequest,
};
use futures::stream::BoxStream;
use futures::StreamExt;
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::tls::PinnedVerifier;
use tonic::Streaming;

use crate::pb::node_client::NodeClient;
use crate::pb::{upload, Call, Item, Upload};
use crate::wire::{decode, encode, unreachable, with_token};
use crate::{BuildItem, Method, CHUNK_BYTES, MAX_MESSAGE_BYTES, PROTOCOL_FLOOR, PROTOCOL_VERSION};

/// A node agent reached over gRPC. Cheap to clone.
#[derive(Clone)]
pub struct RemoteNode {
    pub(crate) client: NodeClient<Channel>,
    pub(crate) token: String,
    capabilities: NodeCapabilities,
    recipes: Vec<RecipeInfo>,
    /// The protocol version both sides speak (learnt at the handshake).
    version: u32,
}

impl RemoteNode {
    /// Connects to the node agent at `address` (`https://host:port`) over TLS accepting only
    /// `certificate` (DER, the one the node sent in its join), with the join token, and reads
    /// its capabilities and recipes (both fixed for the node's lifetime).
    ///
    /// # Errors
    /// `NodeUnreachable` when it does not answer, presents another certificate or refuses the
    /// token; `Internal` when the address is malformed.
    pub async fn connect(
        address: &str,
        token: &str,
        certificate: CertificateDer<'static>,
    ) -> Result<RemoteNode, NodeError> {
        Self::connect_speaking(address, token, certificate, PROTOCOL_VERSION).await
    }

    /// [`RemoteNode::connect`] as a control plane of protocol `version` would (at most
    /// [`PROTOCOL_VERSION`]): tests of mixed versions.
    #[doc(hidden)]
    pub async fn connect_speaking(
        address: &str,
        token: &str,
        certificate: CertificateDer<'static>,
        version: u32,
    ) -> Result<RemoteNode, NodeError> {
        let endpoint = crate::transport::endpoint(address)
            .map_err(NodeError::Internal)?
            .connect_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(std::time::Duration::from_secs(10))
            .keep_alive_timeout(std::time::Duration::from_secs(10));
        let config = PinnedVerifier::pinned(certificate)
            .client_config()
            .map_err(|e| NodeError::Internal(e.to_string()))?;
        let channel = crate::transport::tls_channel(endpoint, config, false)
            .await
            .map_err(|e| NodeError::NodeUnreachable(format!("connect {address}: {e}")))?;
        let client = NodeClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut node = RemoteNode {
            client,
            token: token.to_string(),
            // Replaced by the node's own answer (volumes included) right below.
            capabilities: NodeCapabilities {
                runtime: String::new(),
                boundary: String::new(),
                pause: false,
                suspend_memory: false,
                snapshot_store: String::new(),
                network: false,
                user_namespaces: false,
                volumes: false,
                attach_volumes: false,
            },
            recipes: Vec::new(),
            // The handshake goes out at the floor, which every node accepts.
            version: PROTOCOL_FLOOR,
        };
        let (capabilities, theirs) = node.handshake().await?;
        node.capabilities = capabilities;
        node.version = crate::contract::shared(version, theirs);
        node.recipes = node.call(Method::Recipes, ()).await?;
        Ok(node)
    }

    /// The protocol version this node and this control plane share.
    pub fn protocol_version(&self) -> u32 {
        self.version
    }

    /// The capabilities call, at the floor; its reply carries the node's version (0 from a
    /// v9 node, which predates the field).
    async fn handshake(&self) -> Result<(NodeCapabilities, u32), NodeError> {
        let (result, version) = self.unary(Method::Capabilities, ()).await?;
        Ok((result?, version))
    }

    /// The call of `method`; `Unsupported` when the version both sides speak lacks it.
    pub(crate) fn envelope(&self, method: Method, args: impl Serialize) -> Result<Call, NodeError> {
        method.check(self.version)?;
        Ok(Call {
            version: self.version,
            method: method.number(),
            args: encode(&args),
        })
    }

    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        args: impl Serialize,
    ) -> Result<T, NodeError> {
        self.unary(method, args).await?.0
    }

    /// A unary call's decoded result and the node's version in its reply.
    async fn unary<T: DeserializeOwned>(
        &self,
        method: Method,
        args: impl Serialize,
    ) -> Result<(Result<T, NodeError>, u32), NodeError> {
        let req = with_token(self.envelope(method, args)?, &self.token);
        let reply = self
            .client
            .clone()
            .unary(req)
            .await
            .map_err(unreachable)?
            .into_inner();
        Ok((decode(&reply.result)?, reply.version))
    }

    /// A client-stream call: `method` with `args`, then `body`'s bytes; its unary answer.
    /// A broken body ends the call with that error, and so does `cancel` (`Cancelled`):
    /// dropping the call resets it, so the node keeps nothing of it.
    pub(crate) async fn upload<T: DeserializeOwned>(
        &self,
        method: Method,
        args: impl Serialize,
        body: ByteStream,
        cancel: Option<CancellationToken>,
    ) -> Result<T, NodeError> {
        let (parts, failed) = uploads(self.envelope(method, args)?, body);
        let mut client = self.client.clone();
        let send = client.client_stream(with_token(parts, &self.token));
        let cancelled = async {
            match cancel {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let reply = tokio::select! {
            r = send => r.map_err(unreachable)?.into_inner(),
            Ok(e) = failed => return Err(body_failed(e)),
            () = cancelled => return Err(NodeError::Cancelled),
        };
        decode::<Result<T, NodeError>>(&reply.result)?
    }

    pub(crate) async fn stream(
        &self,
        method: Method,
        args: impl Serialize,
    ) -> Result<Streaming<Item>, NodeError> {
        let req = with_token(self.envelope(method, args)?, &self.token);
        Ok(self
            .client
            .clone()
            .server_stream(req)
            .await
            .map_err(unreachable)?
            .into_inner())
    }

    /// Opens a stream whose first item acknowledges the open (`Ok(())` or the error).
    pub(crate) async fn open(
        &self,
        method: Method,
        args: impl Serialize,
    ) -> Result<Streaming<Item>, NodeError> {
        let mut items = self.stream(method, args).await?;
        let first = next(&mut items).await?;
        decode::<Result<(), NodeError>>(&first.result)??;
        Ok(items)
    }
}

/// The next item, or `NodeUnreachable` when the stream broke or ended early.
pub(crate) async fn next(items: &mut Streaming<Item>) -> Result<Item, NodeError> {
    match items.message().await {
        Ok(Some(item)) => Ok(item),
        Ok(None) => Err(NodeError::NodeUnreachable("the stream ended early".into())),
        Err(s) => Err(unreachable(s)),
    }
}

/// Items decoded as `Result<T, NodeError>`; a broken stream ends with a `NodeUnreachable` item.
fn decoded<T: DeserializeOwned + Send + 'static>(
    items: Streaming<Item>,
    fill: fn(&mut T, Vec<u8>),
) -> BoxStream<'static, Result<T, NodeError>> {
    Box::pin(items.map(move |m| match m {
        Ok(item) => {
            let mut v = decode::<Result<T, NodeError>>(&item.result)??;
            if !item.data.is_empty() {
                fill(&mut v, item.data);
            }
            Ok(v)
        }
        Err(s) => Err(unreachable(s)),
    }))
}

/// The request stream of an upload and the body's read error, if one happens.
type Uploads = (
    tokio_stream::wrappers::ReceiverStream<Upload>,
    tokio::sync::oneshot::Receiver<std::io::Error>,
);

/// Chunks of a byte stream as uploads after `call` (pumped by a task, so the request stream
/// owns nothing borrowed). A read error of the body is reported on the receiver and the stream
/// is kept open, never ended cleanly: the caller then drops the call, which resets it, so the
/// node never mistakes a short body for a whole one.
pub(crate) fn uploads(call: Call, mut body: ByteStream) -> Uploads {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let first = Upload {
            part: Some(upload::Part::Call(call)),
        };
        if tx.send(first).await.is_err() {
            return;
        }
        while let Some(b) = body.next().await {
            let b = match b {
                Ok(b) => b,
                Err(e) => {
                    let _ = failed_tx.send(e);
                    tx.closed().await;
                    return;
                }
            };
            for c in b.chunks(CHUNK_BYTES) {
                let part = Upload {
                    part: Some(upload::Part::Data(c.to_vec())),
                };
                if tx.send(part).await.is_err() {
                    return;
                }
            }
        }
    });
    (tokio_stream::wrappers::ReceiverStream::new(rx), failed_rx)
}

/// A request body that could not be read.
pub(crate) fn body_failed(e: std::io::Error) -> NodeError {
    NodeError::InvalidArgument {
        field: "body".into(),
        message: format!("the request body broke off: {e}"),
    }
}

/// Raw byte items after the head as a byte stream (an `Err` item ends it with that error).
pub(crate) fn bytes_after_head(
    items: Streaming<Item>,
) -> BoxStream<'static, Result<Bytes, NodeError>> {
    Box::pin(items.map(|m| match m {
        Ok(item) if item.result.is_empty() => Ok(Bytes::from(item.data)),
        Ok(item) => match decode::<Result<(), NodeError>>(&item.result)? {
            Ok(()) => Ok(Bytes::new()),
            Err(e) => Err(e),
        },
        Err(s) => Err(unreachable(s)),
    }))
}

#[async_trait]
impl NodeReleases for RemoteNode {
    fn recipes(&self) -> Vec<RecipeInfo> {
        self.recipes.clone()
    }

    /// The build context travels inside the call (JSON), so a call over
    /// [`MAX_MESSAGE_BYTES`] is refused (`TooLarge`) before it is sent.
    async fn build_file_release(
        &self,
        template: &str,
        number: u32,
        build: cove_node_api::FileBuild,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<cove_node_api::BuiltFileRelease, NodeError> {
        let args = (template, number, &build);
        if encode(&args).len() + 1024 > MAX_MESSAGE_BYTES {
            return Err(NodeError::TooLarge(format!(
                "a build context sent to a remote node is limited to about {} MiB",
                MAX_MESSAGE_BYTES / 4 / (1 << 20)
            )));
        }
        let mut items = self.stream(Method::BuildFileRelease, args).await?;
        loop {
            let item = tokio::select! {
                // Dropping the stream cancels the build on the node.
                () = cancel.cancelled() => return Err(NodeError::Cancelled),
                item = next(&mut items) => item?,
            };
            match decode::<Result<BuildItem<cove_node_api::BuiltFileRelease>, NodeError>>(
                &item.result,
            )?? {
                BuildItem::Event(ev) => {
                    let _ = events.send(ev).await;
                }
                BuildItem::Done(built) => return Ok(built),
            }
        }
    }

    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltRelease, NodeError> {
        let mut items = self
            .stream(Method::BuildRelease, (template, number, no_cache))
            .await?;
        loop {
            let item = tokio::select! {
                // Dropping the stream cancels the build on the node.
                () = cancel.cancelled() => return Err(NodeError::Cancelled),
                item = next(&mut items) => item?,
            };
            match decode::<Result<BuildItem, NodeError>>(&item.result)?? {
                BuildItem::Event(ev) => {
                    let _ = events.send(ev).await;
                }
                BuildItem::Done(built) => return Ok(built),
            }
        }
    }

    async fn cached_releases(&self) -> Result<Vec<ReleaseRef>, NodeError> {
        self.call(Method::CachedReleases, ()).await
    }

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        self.call(Method::RemoveRelease, (template, number)).await
    }

    async fn remove_stored_release(&self, digest: &str) -> Result<(), NodeError> {
        self.call(Method::RemoveStoredRelease, (digest,)).await
    }
}

#[async_trait]
impl NodeLifecycle for RemoteNode {
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError> {
        self.call(Method::StartSandbox, (launch,)).await
    }

    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        self.call(Method::AdoptSandbox, (id,)).await
    }

    async fn inspect_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        self.call(Method::InspectSandbox, (id,)).await
    }

    async fn failure_reason(&self, id: &str) -> Option<String> {
        self.call(Method::FailureReason, (id,)).await.ok().flatten()
    }

    async fn check_agent(&self, id: &str, timeout: Duration) -> Result<AgentHealth, NodeError> {
        // The node waits at most `timeout`; the call itself a little longer.
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        match tokio::time::timeout(
            timeout + Duration::from_secs(5),
            self.call(Method::CheckAgent, (id, ms)),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(NodeError::NodeUnreachable(format!(
                "no answer to an agent check of sandbox {id}"
            ))),
        }
    }

    async fn repair_sandbox(&self, launch: SandboxLaunch) -> Result<RepairInfo, NodeError> {
        self.call(Method::RepairSandbox, (launch,)).await
    }

    async fn pause_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::PauseSandbox, (id,)).await
    }

    async fn resume_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::ResumeSandbox, (id,)).await
    }

    async fn suspend_sandbox(
        &self,
        id: &str,
        cancel: CancellationToken,
    ) -> Result<SuspendInfo, NodeError> {
        // Dropping the call resets its HTTP/2 stream, which cancels the suspend on the node.
        tokio::select! {
            () = cancel.cancelled() => Err(NodeError::Cancelled),
            r = self.call(Method::SuspendSandbox, (id,)) => r,
        }
    }

    async fn wake_sandbox(
        &self,
        launch: SandboxLaunch,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        tokio::select! {
            () = cancel.cancelled() => Err(NodeError::Cancelled),
            r = self.call(Method::WakeSandbox, (launch,)) => r,
        }
    }

    async fn release_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::ReleaseSandbox, (id,)).await
    }

    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::DestroySandbox, (id,)).await
    }

    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError> {
        self.call(Method::ListSandboxes, ()).await
    }

    async fn has_snapshot(&self, id: &str) -> Result<bool, NodeError> {
        self.call(Method::HasSnapshot, (id,)).await
    }

    async fn delete_snapshot(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::DeleteSnapshot, (id,)).await
    }

    async fn list_snapshots(&self) -> Result<Vec<String>, NodeError> {
        self.call(Method::ListSnapshots, ()).await
    }

    async fn sweep_snapshots(&self) -> Result<u64, NodeError> {
        self.call(Method::SweepSnapshots, ()).await
    }

    fn capabilities(&self) -> NodeCapabilities {
        self.capabilities.clone()
    }
}

fn fill_attach(ev: &mut AttachEvent, bytes: Vec<u8>) {
    if let AttachEvent::Output { data, .. } = ev {
        *data = Bytes::from(bytes);
    }
}

#[async_trait]
impl NodeCommands for RemoteNode {
    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError> {
        self.call(Method::Spawn, (sandbox_id, req)).await
    }

    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError> {
        self.call(Method::Command, (sandbox_id, command_id)).await
    }

    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError> {
        self.call(Method::Commands, (sandbox_id,)).await
    }

    async fn signal(
        &self,
        sandbox_id: &str,
        command_id: &str,
        signal: i32,
    ) -> Result<(), NodeError> {
        self.call(Method::Signal, (sandbox_id, command_id, signal))
            .await
    }

    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError> {
        self.call(Method::Kill, (sandbox_id, command_id, grace_ms))
            .await
    }

    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError> {
        let items = self
            .open(Method::Attach, (sandbox_id, command_id, offset, follow))
            .await?;
        Ok(decoded(items, fill_attach))
    }

    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError> {
        self.call(Method::StdinWrite, (sandbox_id, command_id, data.to_vec()))
            .await
    }

    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.call(Method::StdinClose, (sandbox_id, command_id))
            .await
    }

    async fn resize(
        &self,
        sandbox_id: &str,
        command_id: &str,
        size: PtySize,
    ) -> Result<(), NodeError> {
        self.call(Method::Resize, (sandbox_id, command_id, size))
            .await
    }

    async fn forget(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.call(Method::Forget, (sandbox_id, command_id)).await
    }
}

#[async_trait]
impl NodeFiles for RemoteNode {
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        self.upload(Method::WriteFile, (sandbox_id, req), body, None)
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
        let mut items = self
            .stream(Method::ReadFile, (sandbox_id, path, user, offset, length))
            .await?;
        let head = next(&mut items).await?;
        let info = decode::<Result<FileInfo, NodeError>>(&head.result)??;
        Ok((info, bytes_after_head(items)))
    }

    async fn stat(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.call(Method::Stat, (sandbox_id, path, user)).await
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError> {
        self.call(Method::ListDir, (sandbox_id, path, user, depth))
            .await
    }

    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.call(Method::MakeDir, (sandbox_id, path, user)).await
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), NodeError> {
        self.call(Method::Remove, (sandbox_id, path, user)).await
    }

    async fn rename(
        &self,
        sandbox_id: &str,
        from: SandboxPath,
        to: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.call(Method::Rename, (sandbox_id, from, to, user))
            .await
    }

    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError> {
        let items = self.open(Method::Watch, (sandbox_id, req)).await?;
        Ok(decoded(items, |_, _| {}))
    }

    async fn set_xattrs(&self, sandbox_id: &str, req: SetXattrsRequest) -> Result<(), NodeError> {
        self.call(Method::SetXattrs, (sandbox_id, req)).await
    }

    async fn xattrs(
        &self,
        sandbox_id: &str,
        req: XattrsRequest,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, NodeError> {
        self.call(Method::Xattrs, (sandbox_id, req)).await
    }
}

#[async_trait]
impl NodeMetrics for RemoteNode {
    async fn capacity(&self) -> Result<NodeCapacity, NodeError> {
        self.call(Method::Capacity, ()).await
    }

    async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, NodeError> {
        self.call(Method::SandboxMetrics, (id,)).await
    }
}

#[async_trait]
impl NodeNetwork for RemoteNode {
    async fn sandbox_network(&self, id: &str) -> Result<SandboxNetworkInfo, NodeError> {
        self.call(Method::SandboxNetwork, (id,)).await
    }

    async fn set_sandbox_network(&self, id: &str, policy: EgressPolicy) -> Result<(), NodeError> {
        self.call(Method::SetSandboxNetwork, (id, policy)).await
    }

    async fn rearm_secrets(
        &self,
        id: &str,
        secrets: BTreeMap<String, LaunchSecret>,
    ) -> Result<(), NodeError> {
        self.call(Method::RearmSecrets, (id, secrets)).await
    }

    async fn forward_http(
        &self,
        id: &str,
        request: PortRequest,
        body: ByteStream,
    ) -> Result<(PortResponse, ByteStream), NodeError> {
        let call = self.envelope(Method::ForwardHttp, (id, request))?;
        let (parts, _failed) = uploads(call, body);
        let mut items = self
            .client
            .clone()
            .bidi(with_token(parts, &self.token))
            .await
            .map_err(unreachable)?
            .into_inner();
        let head = next(&mut items).await?;
        let head = decode::<Result<PortResponse, NodeError>>(&head.result)??;
        let body: ByteStream = Box::pin(
            bytes_after_head(items).map(|b| b.map_err(|e| std::io::Error::other(e.to_string()))),
        );
        Ok((head, body))
    }

    fn network_denials(&self) -> BoxStream<'static, NetworkDenied> {
        let node = self.clone();
        Box::pin(
            futures::stream::once(async move { node.stream(Method::NetworkDenials, ()).await })
                .flat_map(|items| match items {
                    Ok(items) => decoded::<NetworkDenied>(items, |_, _| {})
                        .take_while(|d| futures::future::ready(d.is_ok()))
                        .filter_map(|d| async move { d.ok() })
                        .boxed(),
                    Err(_) => futures::stream::empty().boxed(),
                }),
        )
    }
}
