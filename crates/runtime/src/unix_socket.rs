//! A guest channel over a unix socket on the host (runc bind-mounts the agent's socket out of
//! the sandbox): every stream is a new connection to it.

use std::path::PathBuf;

use async_trait::async_trait;

use crate::{GuestConnector, GuestStream};

/// Connects to a guest agent's unix socket, once per stream.
#[derive(Debug, Clone)]
pub struct UnixSocketConnector {
    socket: PathBuf,
}

impl UnixSocketConnector {
    /// A connector to `socket`. No I/O happens here.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        UnixSocketConnector {
            socket: socket.into(),
        }
    }
}

#[async_trait]
impl GuestConnector for UnixSocketConnector {
    async fn connect(&self) -> std::io::Result<GuestStream> {
        let stream = tokio::net::UnixStream::connect(&self.socket).await?;
        Ok(Box::new(stream))
    }
}
