use super::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// A guest that echoes every stream and accepts `SetClock` but refuses `AddEntropy`.
fn start_guest(channel: DuplexStream) {
    let (rd, wr) = tokio::io::split(channel);
    tokio::spawn(async move {
        let _ = serve(
            rd,
            wr,
            |s| {
                tokio::spawn(async move {
                    let (mut r, mut w) = tokio::io::split(s);
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            },
            |c| match c {
                Control::SetClock { .. } => Ok(()),
                Control::AddEntropy { .. } => Err("no entropy today".into()),
                Control::SetHostname { .. } | Control::SetNetwork { .. } => Ok(()),
            },
        )
        .await;
    });
}

async fn client() -> MuxClient {
    let (host, guest) = tokio::io::duplex(16 * 1024);
    start_guest(guest);
    let (rd, wr) = tokio::io::split(host);
    MuxClient::connect(rd, wr, T).await.expect("connect")
}

#[tokio::test]
async fn many_streams_echo_large_payloads() {
    let mux = client().await;
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let s = mux.open().await.expect("open");
        tasks.push(tokio::spawn(async move {
            let payload: Vec<u8> = (0..1_000_000u32).map(|b| (b as u8) ^ i).collect();
            let (mut r, mut w) = tokio::io::split(s);
            let send = payload.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&send).await.expect("write");
                w.shutdown().await.expect("shutdown");
            });
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.expect("read");
            writer.await.expect("writer");
            assert_eq!(got, payload);
        }));
    }
    for t in tasks {
        tokio::time::timeout(T, t)
            .await
            .expect("in time")
            .expect("task");
    }
}

#[tokio::test]
async fn a_stalled_stream_does_not_block_others() {
    let mux = client().await;
    // Fill one stream well past its window and never read its echo.
    let mut stalled = mux.open().await.expect("open");
    let big = vec![7u8; 4 * WINDOW as usize];
    let fill = tokio::spawn(async move {
        let _ = stalled.write_all(&big).await;
        stalled
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut other = mux.open().await.expect("open");
    other.write_all(b"ping").await.expect("write");
    let mut four = [0u8; 4];
    tokio::time::timeout(T, other.read_exact(&mut four))
        .await
        .expect("not blocked")
        .expect("read");
    assert_eq!(&four, b"ping");
    fill.abort();
}

#[tokio::test]
async fn ping_and_control() {
    let mux = client().await;
    mux.ping(T).await.expect("pong");
    mux.control(&Control::SetClock { secs: 1, nanos: 2 }, T)
        .await
        .expect("clock");
    let err = mux
        .control(&Control::AddEntropy { bytes: vec![1; 32] }, T)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("no entropy today"), "{err}");
}

#[tokio::test]
async fn garbage_before_hello_is_skipped_and_shutdown_closes() {
    let (host, guest) = tokio::io::duplex(16 * 1024);
    start_guest(guest);
    let (mut rd, mut wr) = tokio::io::split(host);
    // Garbage and half a frame before the session starts are skipped by the guest.
    let mut out = vec![0xff, 0x03, 0, 0];
    Frame::Hello { session: 5 }.encode(&mut out);
    wr.write_all(&out).await.expect("write");
    let want = Frame::Hello { session: 5 }.to_bytes();
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(T, rd.read_exact(&mut got))
        .await
        .expect("hello in time")
        .expect("read");
    assert_eq!(got, want);
    // A client on the same channel starts a new session (the guest drops the old one's streams).
    let mux = MuxClient::connect(rd, wr, T).await.expect("connect");
    let mut s = mux.open().await.expect("open");
    s.write_all(b"abc").await.expect("write");
    let mut b = [0u8; 3];
    s.read_exact(&mut b).await.expect("read");
    assert_eq!(&b, b"abc");
    mux.shutdown();
    assert!(mux.is_closed());
    assert!(mux.open().await.is_err());
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
}

#[tokio::test]
async fn a_peer_overrunning_credit_breaks_the_session() {
    let (host, guest) = tokio::io::duplex(1 << 20);
    let (grd, gwr) = tokio::io::split(guest);
    let opened = Arc::new(AtomicU32::new(0));
    let seen = opened.clone();
    let server = tokio::spawn(async move {
        serve(
            grd,
            gwr,
            move |s| {
                seen.fetch_add(1, Ordering::SeqCst);
                // Keep the stream but never read it.
                std::mem::forget(s);
            },
            |_| Ok(()),
        )
        .await
    });
    let (mut hrd, mut hwr) = tokio::io::split(host);
    let mut out = Vec::new();
    Frame::Hello { session: 1 }.encode(&mut out);
    Frame::Open { id: 1 }.encode(&mut out);
    for _ in 0..(WINDOW as usize / MAX_DATA + 2) {
        Frame::Data {
            id: 1,
            data: vec![0; MAX_DATA],
        }
        .encode(&mut out);
    }
    // A Hello after the violation starts a fresh session that still works.
    Frame::Hello { session: 2 }.encode(&mut out);
    Frame::Ping { seq: 9 }.encode(&mut out);
    hwr.write_all(&out).await.expect("write");
    let mut got = Vec::new();
    let want = Frame::Pong { seq: 9 }.to_bytes();
    let deadline = tokio::time::Instant::now() + T;
    while !got.windows(want.len()).any(|w| w == want.as_slice()) {
        let mut b = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, hrd.read(&mut b))
            .await
            .expect("pong in time")
            .expect("read");
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(opened.load(Ordering::SeqCst), 1);
    drop(hwr);
    drop(hrd);
    let _ = tokio::time::timeout(T, server).await.expect("server ends");
}
