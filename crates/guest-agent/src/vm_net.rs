//! A VM's network, as the host asks ([`Control::SetNetwork`]): the guest's only peer is the
//! node's gateway on `eth0` (a tap in the sandbox's namespace on the host side).
//!
//! Done with the classic interface and route ioctls on a datagram socket (no `ip` binary is
//! needed in the release): `lo` and `eth0` up, `address`/32 on `eth0` (the previous address goes
//! with it), a host route to the gateway on `eth0`, the default route through the gateway. Called
//! again after a wake (the sandbox may get another address), it replaces what was there.
//!
//! [`Control::SetNetwork`]: cove_guest_protocol::mux::Control::SetNetwork
#![allow(unsafe_code)]

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tracing::info;

/// Interface facing the gateway.
const IFACE: &str = "eth0";
/// The system trust bundle (Debian's) the gateway's CA is appended to.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Longest `resolv.conf` accepted.
const MAX_RESOLV: usize = 4096;
/// Longest CA accepted.
const MAX_CA: usize = 16 * 1024;

/// Applies the network the host asked for. Errors name the step that failed.
pub fn configure(
    address: [u8; 4],
    gateway: [u8; 4],
    resolv_conf: &str,
    ca_pem: Option<&str>,
) -> Result<(), String> {
    if resolv_conf.len() > MAX_RESOLV || ca_pem.is_some_and(|c| c.len() > MAX_CA) {
        return Err("resolv.conf or CA too large".into());
    }
    let (address, gateway) = (Ipv4Addr::from(address), Ipv4Addr::from(gateway));
    // SAFETY: socket(2) with constant arguments; the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    set_up(&sock, "lo").map_err(|e| format!("lo up: {e}"))?;
    set_addr(&sock, IFACE, libc::SIOCSIFADDR, address)
        .map_err(|e| format!("{IFACE} address: {e}"))?;
    set_addr(
        &sock,
        IFACE,
        libc::SIOCSIFNETMASK,
        Ipv4Addr::new(255, 255, 255, 255),
    )
    .map_err(|e| format!("{IFACE} netmask: {e}"))?;
    set_up(&sock, IFACE).map_err(|e| format!("{IFACE} up: {e}"))?;
    // Replacing the address dropped the routes through it; a leftover default goes first.
    let _ = route(&sock, libc::SIOCDELRT, Ipv4Addr::UNSPECIFIED, None);
    route(&sock, libc::SIOCADDRT, gateway, None).map_err(|e| format!("route to gateway: {e}"))?;
    route(&sock, libc::SIOCADDRT, Ipv4Addr::UNSPECIFIED, Some(gateway))
        .map_err(|e| format!("default route: {e}"))?;
    write_atomic("/etc/resolv.conf", resolv_conf.as_bytes())
        .map_err(|e| format!("/etc/resolv.conf: {e}"))?;
    if let Some(ca) = ca_pem {
        let mut bundle = std::fs::read(CA_BUNDLE).unwrap_or_default();
        if !String::from_utf8_lossy(&bundle).contains(ca.trim()) {
            if !bundle.is_empty() && !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
            bundle.extend_from_slice(ca.as_bytes());
            write_atomic(CA_BUNDLE, &bundle).map_err(|e| format!("{CA_BUNDLE}: {e}"))?;
        }
    }
    info!(%address, %gateway, "network configured by the host");
    Ok(())
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn sockaddr(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size (16 bytes); the bytes are copied.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn ioctl<T>(sock: &OwnedFd, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the structure the request expects and lives for the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), request as _, arg as *mut T) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_up(sock: &OwnedFd, name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    ioctl(sock, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    ioctl(sock, libc::SIOCSIFFLAGS, &mut req)
}

fn set_addr(sock: &OwnedFd, name: &str, request: libc::c_ulong, ip: Ipv4Addr) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_addr = sockaddr(ip);
    ioctl(sock, request, &mut req)
}

/// Adds or deletes a route: to `dst`/32 on `eth0` without a gateway, or the default route
/// (`dst` unspecified) through `via`.
fn route(
    sock: &OwnedFd,
    request: libc::c_ulong,
    dst: Ipv4Addr,
    via: Option<Ipv4Addr>,
) -> io::Result<()> {
    let mut dev = *b"eth0\0";
    // SAFETY: rtentry is plain data; all zeroes is a valid value.
    let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
    rt.rt_dst = sockaddr(dst);
    rt.rt_flags = libc::RTF_UP;
    match via {
        Some(gw) => {
            rt.rt_gateway = sockaddr(gw);
            rt.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED);
            rt.rt_flags |= libc::RTF_GATEWAY;
        }
        None if dst.is_unspecified() => rt.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED),
        None => {
            rt.rt_genmask = sockaddr(Ipv4Addr::new(255, 255, 255, 255));
            rt.rt_flags |= libc::RTF_HOST;
        }
    }
    rt.rt_dev = dev.as_mut_ptr().cast();
    match ioctl(sock, request, &mut rt) {
        Err(e) if request == libc::SIOCADDRT && e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

fn write_atomic(path: &str, data: &[u8]) -> io::Result<()> {
    let tmp = format!("{path}.cove-tmp");
    // A symlink in place (Debian's resolv.conf may be one) is replaced, never followed.
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}
