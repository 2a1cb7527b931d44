//! Zero-copy relay of a plain proxied connection with splice(2) through a pipe per direction:
//! the payload never enters user space.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;

use nix::fcntl::{OFlag, SpliceFFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::counters::Counters;

/// Bytes moved per splice call (the pipe is resized to this when the kernel allows).
const CHUNK: usize = 1 << 20;

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) =
        nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let _ = nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&w),
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(CHUNK as i32),
    );
    Ok((r, w))
}

fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

/// Moves bytes from `from` to `to` until `from` ends, then shuts `to`'s write side.
async fn one_way(from: &TcpStream, to: &TcpStream, counter: Option<&AtomicU64>) -> io::Result<()> {
    let (pr, pw) = pipe()?;
    loop {
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                nix::fcntl::splice(from, None, &pw, None, CHUNK, flags()).map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            let fd = std::os::fd::AsRawFd::as_raw_fd(to);
            let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Write);
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                nix::fcntl::splice(&pr, None, to, None, left, flags()).map_err(io::Error::from)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        if let Some(c) = counter {
            Counters::add(c, n as u64);
        }
    }
}

/// Relays both directions until both have ended (or one fails). `out` counts bytes from the
/// sandbox, `inn` bytes toward it.
pub(crate) async fn relay(
    sandbox: &TcpStream,
    upstream: &TcpStream,
    out: &AtomicU64,
    inn: &AtomicU64,
) -> io::Result<()> {
    tokio::try_join!(
        one_way(sandbox, upstream, Some(out)),
        one_way(upstream, sandbox, Some(inn))
    )
    .map(drop)
}
