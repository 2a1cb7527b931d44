//! The crate's error type.

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Everything that can go wrong while building, using or tearing down sandbox networks.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// The node configuration is unusable (bad prefix, pool too small, ...).
    #[error("invalid network config: {0}")]
    Config(String),
    /// The configured sandbox pool overlaps a route of the host (or of the upstream namespace).
    #[error("sandbox pool {pool} overlaps the route {route} of {namespace}")]
    PoolOverlapsRoute {
        /// The configured pool.
        pool: ipnet::Ipv4Net,
        /// The conflicting route's destination.
        route: ipnet::Ipv4Net,
        /// Which namespace holds the route (`host` or a namespace path).
        namespace: String,
    },
    /// `ip` or `nft` failed.
    #[error("command `{command}` failed: {stderr}")]
    Command {
        /// The command line (program and arguments).
        command: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// Spawning or talking to a helper process or thread failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Entering a network namespace failed.
    #[error("entering network namespace {path}: {source}")]
    Setns {
        /// The namespace file.
        path: PathBuf,
        /// The errno.
        #[source]
        source: nix::Error,
    },
    /// Every address of the pool is in use.
    #[error("sandbox address pool {0} is exhausted")]
    PoolExhausted(ipnet::Ipv4Net),
    /// The sandbox already has a network.
    #[error("sandbox {0} already has a network")]
    AlreadyAttached(String),
    /// The sandbox has no network on this node.
    #[error("sandbox {0} has no network")]
    NotAttached(String),
    /// An address that should be in the pool is not.
    #[error("address {0} is not in the sandbox pool")]
    NotInPool(Ipv4Addr),
    /// The gateway has been shut down.
    #[error("the network gateway is shut down")]
    ShutDown,
}

impl NetworkError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        NetworkError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = NetworkError> = std::result::Result<T, E>;
