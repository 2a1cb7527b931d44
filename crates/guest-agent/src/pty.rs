//! Pseudo-terminals of commands: opening a pair, reading and writing the master side, resizing.
//!
//! Both sides are opened close-on-exec (`posix_openpt(O_CLOEXEC)`, the slave with `O_CLOEXEC`),
//! so a command started concurrently never inherits another command's terminal. The child makes
//! the slave its controlling terminal (see [`crate::spawn`]). The master is non-blocking and
//! driven by tokio; once every slave descriptor is closed, reading it fails with `EIO`, which
//! [`PtyMaster::read`] reports as end of file.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use cove_guest_protocol::PtySize;
use nix::fcntl::OFlag;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The byte a terminal in canonical mode reads as end of input (`VEOF`, Ctrl-D).
pub const EOF_CHAR: u8 = 0x04;

/// A freshly opened pair.
#[derive(Debug)]
pub struct PtyPair {
    /// Master side (close-on-exec, blocking until registered with [`PtyMaster::new`]).
    pub master: OwnedFd,
    /// Slave side (close-on-exec; the child dup2s it onto 0, 1 and 2).
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal pair of `size`.
pub fn open(size: PtySize) -> io::Result<PtyPair> {
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: `open` returned a new descriptor that nothing else owns.
    let slave = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(slave) };
    // SAFETY: `PtyMaster` (nix) owns its descriptor; `into_raw_fd` hands that ownership over.
    let master = unsafe {
        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(
            master,
        ))
    };
    set_size(master.as_raw_fd(), size)?;
    Ok(PtyPair { master, slave })
}

/// Sets the window size of the terminal behind `fd` (master or slave); the foreground process
/// group gets `SIGWINCH`.
fn set_size(fd: i32, size: PtySize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a `winsize` from the valid pointer we pass; fd is ours.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The master side of a command's terminal, registered with tokio.
#[derive(Debug)]
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
}

impl PtyMaster {
    /// Makes `master` non-blocking and registers it (needs a tokio runtime).
    pub fn new(master: OwnedFd) -> io::Result<Self> {
        let flags = nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
        // SAFETY: an `OwnedFd` is a valid open descriptor that stays open, and its `as_raw_fd`
        // returns the same descriptor, for as long as the `AsyncFd` owns it.
        let fd = unsafe {
            AsyncFd::register_with_interest(master, Interest::READABLE | Interest::WRITABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        Ok(Self { fd })
    }

    /// Reads what the command wrote; `Ok(0)` once no process holds the slave side any more.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let result = guard.try_io(|fd| {
                // SAFETY: `buf` is valid for writes of its length; fd is open.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match result {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }

    /// Writes all of `data` as terminal input.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            let result = guard.try_io(|fd| {
                // SAFETY: `data` is valid for reads of its length; fd is open.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match result {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    /// Changes the terminal's size.
    pub fn resize(&self, size: PtySize) -> io::Result<()> {
        set_size(self.fd.get_ref().as_raw_fd(), size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pair_carries_bytes_both_ways_and_reports_eof() {
        let pair = open(PtySize {
            cols: 100,
            rows: 30,
        })
        .expect("openpty");
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes a winsize into the valid local.
        assert_eq!(
            unsafe { libc::ioctl(pair.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            0
        );
        assert_eq!((ws.ws_col, ws.ws_row), (100, 30));
        let master = PtyMaster::new(pair.master).expect("register");
        master.resize(PtySize { cols: 7, rows: 3 }).expect("resize");
        // SAFETY: as above.
        unsafe { libc::ioctl(pair.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
        assert_eq!((ws.ws_col, ws.ws_row), (7, 3));
        let slave = std::fs::File::from(pair.slave);
        std::io::Write::write_all(&mut &slave, b"out").expect("write slave");
        let mut buf = [0u8; 16];
        let n = master.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"out");
        drop(slave);
        let mut rest = Vec::new();
        loop {
            let n = master.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&buf[..n]);
        }
        assert!(rest.is_empty(), "{rest:?}");
    }
}
