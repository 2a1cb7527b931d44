//! A stream multiplexer over one byte stream, with per-stream credit.
//!
//! A VM has one channel to the host (a virtio-serial port, a unix socket on the host side), but
//! the guest protocol wants one connection per stream (see the crate docs). This module carries
//! many bidirectional byte streams over that one channel. The host opens streams; each stream
//! is handed to its user as a [`tokio::io::DuplexStream`], so the code that speaks the guest
//! protocol over a unix socket speaks it unchanged over a mux stream.
//!
//! # Rules
//! - A session starts with [`Frame::Hello`] from the host, repeated until the guest answers with
//!   the same `Hello`; a guest that sees a new session number drops every stream it had (the host
//!   reconnected). A reader that meets bytes it cannot decode drops the session's streams and
//!   scans for the next `Hello`. Ending a session ([`MuxClient::shutdown`], or a timed-out
//!   connect) stops its tasks, which drop the channel.
//! - Flow control: each direction of each stream starts with [`WINDOW`] bytes of credit. A sender
//!   sends [`Frame::Data`] only within its credit; the receiver grants [`Frame::Credit`] as its
//!   user consumes the bytes. A peer that overruns its credit breaks the session (its streams are
//!   dropped), so one stream's slow reader never stalls another stream and memory per stream is
//!   bounded by the window (plus the duplex buffer of [`STREAM_BUFFER`] bytes).
//! - [`Frame::Close`] is a half-close (the reader sees end of file); [`Frame::Reset`] abandons
//!   both directions. A stream whose user dropped its end is reset.
//! - [`Frame::Ping`]/[`Frame::Pong`] are the heartbeat; [`Frame::Control`] asks the guest's
//!   transport itself to do something ([`Control`]: set the clock, add entropy after a restore).

mod frame;
mod session;

pub use frame::{find_hello, DecodeError, Frame, HEADER_BYTES, HELLO_MAGIC, MAX_CONTROL, MAX_DATA};
pub use session::{serve, MuxClient, MuxError};

use serde::{Deserialize, Serialize};

/// Initial credit of each direction of a stream, in bytes (256 KiB).
pub const WINDOW: u32 = 256 * 1024;

/// Bytes buffered between a stream's user and the mux (each direction of the duplex pipe).
pub const STREAM_BUFFER: usize = 64 * 1024;

/// A request to the guest's transport (not to the guest agent): done by the transport itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Set the guest's wall clock (`CLOCK_REALTIME`) to this time since the Unix epoch.
    SetClock {
        /// Whole seconds.
        secs: i64,
        /// Nanoseconds, below 1e9.
        nanos: u32,
    },
    /// Mix these bytes into the guest kernel's random pool, credit them as entropy
    /// (`RNDADDENTROPY`) and reseed the CRNG at once (`RNDRESEEDCRNG`), so restored clones do
    /// not share random state. At most 512 bytes.
    AddEntropy {
        /// Random bytes from the host.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Set the guest's hostname (a VM cloned from a base snapshot has the base's).
    SetHostname {
        /// The name, at most 64 bytes.
        name: String,
    },
    /// Configure the guest's network (a VM behind the node's gateway): `lo` and `eth0` up,
    /// `address`/32 on `eth0` (replacing any other), a route to `gateway` on `eth0` and the
    /// default route through it, `/etc/resolv.conf` replaced by `resolv_conf`, and `ca_pem`
    /// (the gateway's interception CA) appended to the system trust bundle unless it holds it.
    SetNetwork {
        /// The guest's IPv4 address.
        address: [u8; 4],
        /// The gateway's IPv4 address (the only peer, and the resolver).
        gateway: [u8; 4],
        /// Content of `/etc/resolv.conf`, at most 4 KiB.
        resolv_conf: String,
        /// A CA to trust besides the release's own (PEM, at most 16 KiB).
        ca_pem: Option<String>,
    },
}

impl Control {
    /// The encoding carried in a [`Frame::Control`].
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes a [`Frame::Control`] body.
    pub fn decode(body: &[u8]) -> Result<Control, postcard::Error> {
        postcard::from_bytes(body)
    }
}
