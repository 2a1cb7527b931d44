//! Protocol versions between the node and a guest agent: the host offers its newest version; an
//! agent of version 1 (one started before the node was upgraded, which refuses any other
//! offer) is spoken to in version 1, and a version-2 call to it is answered by the host itself
//! (`TooOld`) without sending a frame the agent could not decode.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cove_guest_protocol::{
    read_frame, write_frame, ErrorCode, GuestFrame, GuestPath, HostFrame, Request, Response,
    MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use cove_node_agent::guest::{GuestClient, GuestError};
use tokio::net::UnixListener;

/// A fake agent that speaks version 1 only, as the agents before version 2 did: `Hello{1}` is
/// answered, any other offer refused with `UnsupportedVersion`; `Ping` answers `Ok`; any other
/// request is counted in `unexpected`.
async fn v1_agent(unexpected: Arc<AtomicU32>) -> (GuestClient, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket: PathBuf = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let unexpected = unexpected.clone();
            tokio::spawn(async move {
                let Ok(hello) = read_frame::<_, HostFrame>(&mut stream).await else {
                    return;
                };
                let response = match hello.request {
                    Request::Hello { version: 1 } => Response::Hello {
                        version: 1,
                        agent_version: "old".into(),
                    },
                    _ => Response::Error {
                        code: ErrorCode::UnsupportedVersion,
                        message: "this agent speaks 1".into(),
                    },
                };
                let ok = matches!(response, Response::Hello { .. });
                let answer = GuestFrame {
                    id: hello.id,
                    response,
                };
                if write_frame(&mut stream, &answer).await.is_err() || !ok {
                    return;
                }
                while let Ok(frame) = read_frame::<_, HostFrame>(&mut stream).await {
                    let response = match frame.request {
                        Request::Ping => Response::Ok,
                        _ => {
                            unexpected.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    };
                    let answer = GuestFrame {
                        id: frame.id,
                        response,
                    };
                    if write_frame(&mut stream, &answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let client = GuestClient::new(Arc::new(cove_runtime::UnixSocketConnector::new(socket)));
    (client, dir)
}

#[tokio::test]
async fn an_old_agent_is_spoken_to_in_its_version() {
    const { assert!(PROTOCOL_VERSION > MIN_PROTOCOL_VERSION) };
    let unexpected = Arc::new(AtomicU32::new(0));
    let (client, _dir) = v1_agent(unexpected.clone()).await;
    client.ping().await.expect("version 1 works");
    let e = client
        .get_xattrs(
            vec![GuestPath(b"/tmp/a".to_vec())],
            None,
            "user.e2b.".into(),
        )
        .await
        .expect_err("the old agent lacks xattrs");
    assert!(matches!(e, GuestError::TooOld(_)), "{e:?}");
    // The connection still serves, and the agent never saw the v2 request.
    client.ping().await.expect("still works");
    assert_eq!(unexpected.load(Ordering::Relaxed), 0);
}
