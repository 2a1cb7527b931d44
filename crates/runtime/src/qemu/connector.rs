//! The guest connector of a VM: mux streams over the virtio-serial chardev socket.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use cove_guest_protocol::mux::{Control, MuxClient, MuxError};
use tokio::net::UnixStream;

use crate::{GuestConnector, GuestStream};

/// How long a stream open waits for the guest to answer a new session.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens mux streams to one VM's guest agent. QEMU's chardev takes one client at a time, so a
/// runtime keeps one connector per VM; it holds one session and makes a new one when the old
/// one ended (the VM restarted, the node reconnected).
#[derive(Debug)]
pub struct MuxConnector {
    socket: PathBuf,
    client: tokio::sync::Mutex<Option<MuxClient>>,
}

impl MuxConnector {
    /// A connector for the chardev socket `socket`. No I/O happens here.
    pub fn new(socket: PathBuf) -> Self {
        MuxConnector {
            socket,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// The live session, or a new one (waiting at most `timeout` for the guest's answer).
    pub async fn session(&self, timeout: Duration) -> Result<MuxClient, MuxError> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let deadline = tokio::time::Instant::now() + timeout;
        // QEMU creates the socket a moment after it starts.
        let stream = loop {
            match UnixStream::connect(&self.socket).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let (rd, wr) = stream.into_split();
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let client = MuxClient::connect(rd, wr, left.max(Duration::from_millis(100))).await?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Sends a transport control request (clock, entropy) over the session.
    pub async fn control(&self, control: &Control, timeout: Duration) -> Result<(), MuxError> {
        self.session(timeout).await?.control(control, timeout).await
    }

    /// Ends the session (its streams see end of file).
    pub async fn shutdown(&self) {
        if let Some(c) = self.client.lock().await.take() {
            c.shutdown();
        }
    }
}

#[async_trait]
impl GuestConnector for MuxConnector {
    async fn connect(&self) -> io::Result<GuestStream> {
        let client = self.session(SESSION_TIMEOUT).await?;
        Ok(Box::new(client.open().await?))
    }
}
