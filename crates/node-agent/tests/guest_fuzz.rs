//! A hostile guest cannot crash the node: random and mutated frames fed to the protocol decoder
//! (`decode_body`, `read_frame`) and to the host's reader of a guest connection (through
//! `GuestClient` against a fake guest socket) yield errors, never a panic, a hang, or an
//! allocation larger than a frame.
//!
//! Cases are bounded (proptest, a fixed number per property) so this runs in `cargo test`.
#![allow(unsafe_code)] // the counting global allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cove_guest_protocol::{
    decode_body, encode_frame, read_frame, write_frame, CommandInfo, CommandState, ErrorCode,
    FileInfo, FileType, GuestFrame, GuestPath, HostFrame, Response, Stream, MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
};
use cove_node_agent::guest::{AttachEvent, GuestClient, GuestError};
use futures::StreamExt;
use proptest::prelude::*;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;

/// Records the largest single allocation of the process.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// No allocation of this process may exceed a frame by much, whatever the guest sends.
const ALLOCATION_BOUND: usize = 2 * MAX_FRAME_BYTES + 64 * 1024;

fn assert_bounded_allocation() {
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= ALLOCATION_BOUND,
        "an allocation of {largest} bytes (bound {ALLOCATION_BOUND})"
    );
}

fn info(id: &str) -> CommandInfo {
    CommandInfo {
        command_id: id.into(),
        pid: 42,
        argv: vec!["/bin/sh".into(), "-c".into(), "echo hi".into()],
        user: "root".into(),
        cwd: "/".into(),
        started_at_ms: 1,
        ended_at_ms: Some(2),
        state: CommandState::Exited,
        exit_code: Some(0),
        signal: None,
        timed_out: false,
        output_bytes: 3,
        truncated: false,
        stdin_open: false,
        oom_killed: false,
        pty: false,
    }
}

/// Valid frames of many kinds, the seeds of mutation.
fn seeds() -> Vec<GuestFrame> {
    let file = FileInfo {
        name: GuestPath(b"a\n\xff".to_vec()),
        path: GuestPath(b"/tmp/a\n\xff".to_vec()),
        file_type: FileType::File,
        size: 10,
        mode: 0o644,
        owner: "root".into(),
        group: "root".into(),
        mtime_ms: 5,
        symlink_target: None,
    };
    let responses = vec![
        Response::Hello {
            version: PROTOCOL_VERSION,
            agent_version: "0.1.0".into(),
        },
        Response::Ok,
        Response::Spawned { pid: 7 },
        Response::SpawnedCommand(info("c0")),
        Response::Output {
            offset: 100,
            stream: Stream::Stderr,
            data: vec![0, 255, 10, 0xe2, 0x89],
        },
        Response::Gap {
            offset: 5,
            len: 1 << 40,
        },
        Response::Exited(info("c1")),
        Response::Command(info("c2")),
        Response::Commands(vec![info("a"), info("b")]),
        Response::CommandsPart(vec![info("p")]),
        Response::Data {
            data: vec![1, 2, 3],
        },
        Response::End,
        Response::FileInfo(file.clone()),
        Response::Entries(vec![file.clone(), file]),
        Response::Error {
            code: ErrorCode::NotFound,
            message: "no command \"x\"".into(),
        },
    ];
    responses
        .into_iter()
        .enumerate()
        .map(|(i, response)| GuestFrame {
            id: i as u64 + 1,
            response,
        })
        .collect()
}

/// A mutation of an encoded frame body.
#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bits: u8,
    },
    Truncate {
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// A varint that announces a huge length (for a Vec, a String or bytes).
    HugeLength {
        at: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        any::<usize>().prop_map(|at| Mutation::HugeLength { at }),
    ]
}

fn mutate(mut body: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let n = body.len().max(1);
        match m {
            Mutation::Flip { at, bits } => {
                if let Some(b) = body.get_mut(at % n) {
                    *b ^= bits;
                }
            }
            Mutation::Truncate { len } => body.truncate(len % n),
            Mutation::Insert { at, bytes } => {
                let at = (at % n).min(body.len());
                body.splice(at..at, bytes.iter().copied());
            }
            Mutation::HugeLength { at } => {
                let at = (at % n).min(body.len());
                body.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
    }
    body
}

fn body_of(frame: &GuestFrame) -> Vec<u8> {
    let encoded = encode_frame(frame).expect("seed encodes");
    encoded[4..].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode_body::<GuestFrame>(&body);
        let _ = decode_body::<HostFrame>(&body);
        assert_bounded_allocation();
    }

    #[test]
    fn mutated_frames_never_panic(
        seed in 0usize..14,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let seeds = seeds();
        let body = mutate(body_of(&seeds[seed % seeds.len()]), &mutations);
        if let Ok(frame) = decode_body::<GuestFrame>(&body) {
            // Whatever decodes re-encodes (no state the codec cannot represent).
            let _ = encode_frame(&frame);
        }
        assert_bounded_allocation();
    }

    #[test]
    fn random_streams_never_panic(stream in prop::collection::vec(any::<u8>(), 0..4096)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async {
            let mut r = &stream[..];
            // Each read consumes at least 4 bytes or fails; the loop ends.
            while read_frame::<_, GuestFrame>(&mut r).await.is_ok() {}
        });
        assert_bounded_allocation();
    }
}

// ---------------------------------------------------------------------------------------------
// A fake guest behind a real socket

/// A fake guest: answers `Hello` properly, then answers the next request with `reply` (raw
/// bytes, possibly garbage) and closes.
async fn fake_guest(reply: Vec<u8>) -> (GuestClient, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket: PathBuf = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let Ok(hello) = read_frame::<_, HostFrame>(&mut stream).await else {
            return;
        };
        let answer = GuestFrame {
            id: hello.id,
            response: Response::Hello {
                version: PROTOCOL_VERSION,
                agent_version: "fake".into(),
            },
        };
        if write_frame(&mut stream, &answer).await.is_err() {
            return;
        }
        if read_frame::<_, HostFrame>(&mut stream).await.is_err() {
            return;
        }
        let _ = stream.write_all(&reply).await;
        let _ = stream.shutdown().await;
    });
    (
        GuestClient::new(std::sync::Arc::new(cove_runtime::UnixSocketConnector::new(
            socket,
        ))),
        dir,
    )
}

fn framed(frame: &GuestFrame) -> Vec<u8> {
    encode_frame(frame).expect("encodes")
}

/// Runs a unary call against a fake guest answering `reply`; it must end (in time) in an error.
async fn call_fails(reply: Vec<u8>) -> GuestError {
    let (client, _dir) = fake_guest(reply).await;
    tokio::time::timeout(Duration::from_secs(10), client.get_command("c1"))
        .await
        .expect("the call ends")
        .expect_err("a hostile answer is an error")
}

#[tokio::test]
async fn hostile_answers_are_errors() {
    // An oversized length prefix: refused before anything is allocated.
    let e = call_fails(u32::MAX.to_be_bytes().to_vec()).await;
    assert!(matches!(e, GuestError::Protocol(_)), "{e:?}");
    let e = call_fails(((MAX_FRAME_BYTES + 1) as u32).to_be_bytes().to_vec()).await;
    assert!(matches!(e, GuestError::Protocol(_)), "{e:?}");
    // Garbage body.
    let mut garbage = 8u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xff; 8]);
    let e = call_fails(garbage).await;
    assert!(matches!(e, GuestError::Protocol(_)), "{e:?}");
    // A frame for an id never issued.
    let e = call_fails(framed(&GuestFrame {
        id: 999,
        response: Response::Command(info("c1")),
    }))
    .await;
    assert!(matches!(e, GuestError::Protocol(_)), "{e:?}");
    // The wrong kind of answer.
    let e = call_fails(framed(&GuestFrame {
        id: 1,
        response: Response::Data { data: vec![1] },
    }))
    .await;
    assert!(matches!(e, GuestError::Protocol(_)), "{e:?}");
    // A frame cut short, then the connection closes.
    let mut cut = framed(&GuestFrame {
        id: 1,
        response: Response::Command(info("c1")),
    });
    cut.truncate(cut.len() / 2);
    let e = call_fails(cut).await;
    assert!(matches!(e, GuestError::Unavailable(_)), "{e:?}");
    assert_bounded_allocation();
}

#[tokio::test]
async fn hostile_attach_streams_end_in_errors() {
    let out = |offset: u64, data: Vec<u8>| {
        framed(&GuestFrame {
            id: 1,
            response: Response::Output {
                offset,
                stream: Stream::Stdout,
                data,
            },
        })
    };
    let gap = |offset: u64, len: u64| {
        framed(&GuestFrame {
            id: 1,
            response: Response::Gap { offset, len },
        })
    };
    let cases: Vec<Vec<u8>> = vec![
        // An offset that overflows.
        [out(0, vec![1]), out(1, vec![2]), out(u64::MAX, vec![1, 2])].concat(),
        [out(0, vec![1]), gap(1, u64::MAX)].concat(),
        // Out of order, empty chunk, zero-length gap.
        [out(0, vec![1]), out(5, vec![2])].concat(),
        out(0, Vec::new()),
        gap(0, 0),
        // Another request's id.
        framed(&GuestFrame {
            id: 7,
            response: Response::End,
        }),
    ];
    for reply in cases {
        let (client, _dir) = fake_guest_stream(reply).await;
        let stream = client.attach("c1", 0, true).await.expect("attach opens");
        futures::pin_mut!(stream);
        let mut last = None;
        while let Some(item) = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the stream ends")
        {
            last = Some(item);
        }
        assert!(
            matches!(last, Some(Err(GuestError::Protocol(_)))),
            "{last:?}"
        );
    }
    // A well-formed stream with a gap is fine.
    let (client, _dir) =
        fake_guest_stream([out(0, vec![1]), gap(1, 10), out(11, vec![2])].concat()).await;
    let stream = client.attach("c1", 0, true).await.expect("attach opens");
    let events: Vec<_> = stream.collect().await;
    assert!(matches!(
        events[1],
        Ok(AttachEvent::Gap { offset: 1, len: 10 })
    ));
    assert_bounded_allocation();
}

/// Like [`fake_guest`] for a streaming connection: after `Hello`, the attach request is
/// answered with `reply` and the connection closed.
async fn fake_guest_stream(reply: Vec<u8>) -> (GuestClient, tempfile::TempDir) {
    fake_guest(reply).await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_answers_from_a_fake_guest_never_panic(
        reply in prop::collection::vec(any::<u8>(), 0..512),
        seed in 0usize..14,
        mutations in prop::collection::vec(mutation(), 0..3),
        use_seed in any::<bool>(),
    ) {
        let reply = if use_seed {
            let seeds = seeds();
            let body = mutate(body_of(&seeds[seed % seeds.len()]), &mutations);
            let mut framed = (body.len() as u32).to_be_bytes().to_vec();
            framed.extend_from_slice(&body);
            framed
        } else {
            reply
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (client, _dir) = fake_guest(reply).await;
            let answer = tokio::time::timeout(Duration::from_secs(10), client.get_command("c1")).await;
            assert!(answer.is_ok(), "the call ends");
        });
        assert_bounded_allocation();
    }
}
