//! VM transport: serves the host's mux streams from a virtio-serial port.
//!
//! In a QEMU sandbox the agent is PID 1 (the initramfs `switch_root`s to it) and the host reaches
//! it through one virtio-serial port (`/dev/vport*`), named by the `COVE_VPORT` environment
//! variable the initramfs sets. This transport runs a [`cove_guest_protocol::mux`] session on
//! the port and joins every stream the host opens to a fresh connection to the agent's own unix
//! socket, so each stream gets the agent's ordinary per-connection handling unchanged.
//!
//! It also does the transport's own requests ([`Control`]): set the wall clock, add entropy,
//! set the hostname, configure the network ([`crate::vm_net`]) (after a snapshot restore or a clone of a base snapshot), and, once at start, grows the root ext4 filesystem online to the
//! size of its disk (the host sizes the copy-on-write disk by `disk_mib`).
//!
//! When the host side is not connected the port reads end of file; the transport then retries
//! every 50 ms (a paused or restored VM's host reconnects and starts a new session).
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use cove_guest_protocol::mux::{self, Control};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tracing::{debug, info, warn};

/// Environment variable naming the virtio-serial port (set by the VM's initramfs).
pub const PORT_ENV: &str = "COVE_VPORT";

/// Pause before reading the port again after its host side closed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// Largest entropy payload accepted, in bytes.
const MAX_ENTROPY: usize = 512;

/// Reads [`PORT_ENV`] and removes it, so commands do not inherit it. Call before threads start.
pub fn take_port_from_env() -> Option<PathBuf> {
    let port = std::env::var_os(PORT_ENV)?;
    std::env::remove_var(PORT_ENV);
    Some(PathBuf::from(port))
}

/// Serves mux sessions on `port` forever, joining streams to the agent's socket `agent_socket`.
pub async fn serve(port: PathBuf, agent_socket: PathBuf) {
    if let Err(e) = grow_root() {
        debug!(error = %e, "root filesystem not grown");
    }
    let agent_socket = Arc::new(agent_socket);
    loop {
        let channel = match Port::open(&port) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                warn!(error = %e, port = %port.display(), "cannot open the virtio-serial port");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        info!(port = %port.display(), "serving the host over virtio-serial");
        loop {
            let socket = agent_socket.clone();
            let result = mux::serve(
                PortHalf(channel.clone()),
                PortHalf(channel.clone()),
                move |stream| {
                    tokio::spawn(join(stream, socket.clone()));
                },
                control,
            )
            .await;
            if let Err(e) = result {
                warn!(error = %e, "virtio-serial port failed; reopening it");
                break;
            }
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// Joins one mux stream to a new connection to the agent's socket.
async fn join(mut stream: tokio::io::DuplexStream, socket: Arc<PathBuf>) {
    let mut conn = None;
    for _ in 0..100 {
        match UnixStream::connect(socket.as_path()).await {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            // The agent may not listen yet right after boot.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let Some(mut conn) = conn else {
        warn!(socket = %socket.display(), "cannot reach the agent's own socket");
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut conn).await;
}

fn control(c: Control) -> Result<(), String> {
    match c {
        Control::SetClock { secs, nanos } => {
            let ts = libc::timespec {
                tv_sec: secs,
                tv_nsec: i64::from(nanos.min(999_999_999)),
            };
            // SAFETY: clock_settime reads the timespec, which lives for the whole call.
            if unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &ts) } != 0 {
                return Err(format!("clock_settime: {}", io::Error::last_os_error()));
            }
            info!(secs, "wall clock set by the host");
            Ok(())
        }
        Control::AddEntropy { bytes } => {
            add_entropy(&bytes).map_err(|e| format!("RNDADDENTROPY: {e}"))
        }
        Control::SetHostname { name } => {
            nix::unistd::sethostname(&name).map_err(|e| format!("sethostname: {e}"))
        }
        Control::SetNetwork {
            address,
            gateway,
            resolv_conf,
            ca_pem,
        } => crate::vm_net::configure(address, gateway, &resolv_conf, ca_pem.as_deref()),
    }
}

/// `_IOW('R', 0x03, int[2])`.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203;
/// `_IO('R', 0x07)`: reseed the kernel's CRNG from its input pool now.
const RNDRESEEDCRNG: libc::c_ulong = 0x5207;
/// `_IOW('f', 16, __u64)`.
const EXT4_IOC_RESIZE_FS: libc::c_ulong = 0x4008_6610;

fn add_entropy(bytes: &[u8]) -> io::Result<()> {
    let bytes = &bytes[..bytes.len().min(MAX_ENTROPY)];
    // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
    let mut info = vec![0u8; 8 + bytes.len().div_ceil(4) * 4];
    info[0..4].copy_from_slice(&((bytes.len() * 8) as i32).to_ne_bytes());
    info[4..8].copy_from_slice(&(bytes.len() as i32).to_ne_bytes());
    info[8..8 + bytes.len()].copy_from_slice(bytes);
    let f = File::open("/dev/urandom")?;
    // SAFETY: the buffer holds a complete rand_pool_info of `buf_size` bytes and outlives the call.
    if unsafe { libc::ioctl(f.as_raw_fd(), RNDADDENTROPY, info.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Crediting entropy does not reseed the CRNG at once (it reseeds on an interval), so a
    // restored clone would go on producing the base's stream: force the reseed.
    // SAFETY: RNDRESEEDCRNG takes no argument.
    if unsafe { libc::ioctl(f.as_raw_fd(), RNDRESEEDCRNG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Grows the root ext4 filesystem to the size of its disk, the virtio disk whose serial is
/// `cove-root` (online resize by the kernel).
fn grow_root() -> io::Result<()> {
    let disk = std::fs::read_dir("/sys/block")?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p.join("serial")).is_ok_and(|s| s.trim() == "cove-root"))
        .ok_or_else(|| io::Error::other("no disk with serial cove-root"))?;
    let sectors: u64 = std::fs::read_to_string(disk.join("size"))?
        .trim()
        .parse()
        .map_err(|_| io::Error::other("bad disk size in sysfs"))?;
    let root = File::open("/")?;
    // SAFETY: statvfs fills the struct, which lives for the whole call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(root.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let block = st.f_frsize.max(1);
    let want = sectors * 512 / block;
    if want <= st.f_blocks + 1024 {
        return Ok(());
    }
    // SAFETY: the ioctl reads one u64, which lives for the whole call.
    if unsafe { libc::ioctl(root.as_raw_fd(), EXT4_IOC_RESIZE_FS, &want) } != 0 {
        return Err(io::Error::last_os_error());
    }
    info!(blocks = want, "root filesystem grown to its disk");
    Ok(())
}

/// The virtio-serial port, non-blocking, registered with the reactor.
struct Port(AsyncFd<File>);

impl Port {
    fn open(path: &Path) -> io::Result<Port> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        // SAFETY: the AsyncFd owns the File, so its descriptor stays open and the same for the
        // AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register(f) }?;
        Ok(Port(fd))
    }
}

/// One direction's handle on the shared port.
struct PortHalf(Arc<Port>);

impl AsyncRead for PortHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0 .0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|f| {
                let mut file: &File = f.get_ref();
                file.read(unfilled)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for PortHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0 .0.poll_write_ready(cx))?;
            match guard.try_io(|f| {
                let mut file: &File = f.get_ref();
                file.write(data)
            }) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
