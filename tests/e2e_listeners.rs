//! Issue 27 finding 4: listeners with bounds. 3,000 connections that never send a byte, from
//! one peer (`127.0.0.2`), against a real server whose limits are small (1,000 per peer, 2 s
//! idle): the server keeps only its per-peer cap of them, closes the rest at once, still
//! answers `/healthz` for another peer (`127.0.0.1`) meanwhile, and closes the idle ones after
//! the idle timeout. A request in flight (the event stream) outlives the idle timeout, and a
//! client that trickles a request's head is cut at the head timeout.
//!
//! Loopback only: every connection goes to the server's API address on 127.0.0.1. Counts and
//! waits are bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cove_e2e::server_with;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const IDLE: Duration = Duration::from_secs(2);
const HEAD: Duration = Duration::from_secs(4);
const PER_PEER: usize = 1_000;
const OPENED: usize = 3_000;

fn tweak(cfg: &mut cove_server::Config) {
    cfg.listen_limits = cove_server::ListenLimits {
        header_timeout: HEAD,
        idle_timeout: IDLE,
        max_connections: 4_096,
        max_connections_per_peer: PER_PEER,
    };
}

fn api_addr() -> SocketAddr {
    server_with(tweak)
        .api_url
        .trim_start_matches("http://")
        .parse()
        .expect("api address")
}

/// A connection to the API from `source` (a loopback address).
async fn connect_from(source: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((source, 0)))
        .expect("bind source");
    tokio::time::timeout(Duration::from_secs(10), socket.connect(api_addr()))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// Waits (at most `limit`) until the server closes `stream`; how long that took, or `None`
/// when it stayed open.
async fn closed_after(mut stream: TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), stream.read(&mut buf))
            .await
        {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// `GET /healthz` from 127.0.0.1 on a fresh connection: the status line.
async fn healthz() -> String {
    let mut s = connect_from([127, 0, 0, 1]).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: cove\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_are_capped_and_closed() {
    api_addr();
    let t0 = Instant::now();
    let mut watchers = Vec::with_capacity(OPENED);
    for _ in 0..OPENED {
        let stream = connect_from([127, 0, 0, 2]).await;
        watchers.push(tokio::spawn(closed_after(stream, Duration::from_secs(30))));
    }
    let opened_in = t0.elapsed();
    // The server answers another peer while the flood holds its places.
    assert_eq!(healthz().await, "HTTP/1.1 200 OK");

    let mut refused = 0;
    let mut idle_closed = Vec::new();
    let mut open = 0;
    for w in watchers {
        match w.await.expect("join") {
            Some(d) if d < IDLE / 2 => refused += 1,
            Some(d) => idle_closed.push(d),
            None => open += 1,
        }
    }
    assert_eq!(open, 0, "connections still open 30 s later");
    assert_eq!(
        refused,
        OPENED - PER_PEER,
        "closed at once (over the per-peer cap); opening took {opened_in:?}"
    );
    assert_eq!(idle_closed.len(), PER_PEER, "kept, then closed when idle");
    let latest = idle_closed.iter().max().copied().unwrap_or_default();
    assert!(
        latest < opened_in + IDLE + Duration::from_secs(5),
        "idle connections lived {latest:?} (idle timeout {IDLE:?})"
    );
    // Every place is back: the same peer connects and is served again.
    let mut s = connect_from([127, 0, 0, 2]).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: cove\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200 OK"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_is_not_idle_and_a_trickled_head_is_cut() {
    let token = server_with(tweak).token.clone();
    // The event stream: a request in flight for longer than the idle timeout stays open.
    let mut events = connect_from([127, 0, 0, 3]).await;
    events
        .write_all(
            format!(
                "GET /v1/events HTTP/1.1\r\nHost: cove\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("send");
    let mut head = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), events.read(&mut head))
        .await
        .expect("answered")
        .expect("read");
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(
        closed_after(events, IDLE * 2).await,
        None,
        "an open event stream was closed as idle"
    );

    // A head sent one byte per 300 ms never completes: cut by the head (or idle) timeout.
    let mut slow = connect_from([127, 0, 0, 4]).await;
    let start = Instant::now();
    let line = b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut = None;
    for b in line.iter() {
        if slow.write_all(&[*b]).await.is_err() {
            cut = Some(start.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut probe = [0u8; 16];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut probe)).await
        {
            cut = Some(start.elapsed());
            break;
        }
    }
    let cut = cut.expect("a trickled head was never cut");
    assert!(
        cut <= HEAD + Duration::from_secs(2),
        "cut after {cut:?}, head timeout {HEAD:?}"
    );
}
