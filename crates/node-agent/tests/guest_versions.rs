//! Protocol versions between the node and a guest agent: the host offers its newest version; an
//! older agent (one started before the node was upgraded, which refuses any newer offer) is
//! spoken to in the newest version it knows. A call it lacks is answered by the host itself
//! (`TooOld`) without sending a frame the agent could not decode, and a spawn it answers with
//! the pid alone is followed by a `GetCommand`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cove_guest_protocol::{
    read_frame, write_frame, CommandInfo, CommandState, ErrorCode, GuestFrame, GuestPath,
    HostFrame, Program, Request, Response, SpawnRequest, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
    SPAWN_INFO_VERSION, XATTRS_VERSION,
};
use cove_node_agent::guest::{GuestClient, GuestError};
use tokio::net::UnixListener;

/// What a fake agent saw.
#[derive(Default)]
struct Seen {
    /// Requests it did not expect of its version.
    unexpected: AtomicU32,
    /// `GetCommand` requests.
    gets: AtomicU32,
}

/// A fake agent that speaks versions 1 to `speaks`, as the agents of that version did: an offer
/// up to it is answered, a newer one refused with `UnsupportedVersion`. `Ping` answers `Ok`;
/// `Spawn` answers `Spawned { pid }` (the version 1 and 2 answer) or, from
/// [`SPAWN_INFO_VERSION`] on, `SpawnedCommand`; `GetCommand` answers the spawned command's
/// state. Anything else is counted in `unexpected`.
async fn old_agent(speaks: u32, seen: Arc<Seen>) -> (GuestClient, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket: PathBuf = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(hello) = read_frame::<_, HostFrame>(&mut stream).await else {
                    return;
                };
                let (response, version) = match hello.request {
                    Request::Hello { version } if version <= speaks => (
                        Response::Hello {
                            version,
                            agent_version: "old".into(),
                        },
                        version,
                    ),
                    _ => (
                        Response::Error {
                            code: ErrorCode::UnsupportedVersion,
                            message: format!("this agent speaks 1 to {speaks}"),
                        },
                        0,
                    ),
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
                        Request::Spawn(req) if version >= SPAWN_INFO_VERSION => {
                            Response::SpawnedCommand(info(&req.command_id))
                        }
                        Request::Spawn(_) => Response::Spawned { pid: 42 },
                        Request::GetCommand { command_id } => {
                            seen.gets.fetch_add(1, Ordering::Relaxed);
                            Response::Command(info(&command_id))
                        }
                        _ => {
                            seen.unexpected.fetch_add(1, Ordering::Relaxed);
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

/// The state the fake agent gives every command.
fn info(command_id: &str) -> CommandInfo {
    CommandInfo {
        command_id: command_id.into(),
        pid: 42,
        argv: vec!["/bin/true".into()],
        user: "root".into(),
        cwd: "/root".into(),
        started_at_ms: 1_700_000_000_000,
        ended_at_ms: None,
        state: CommandState::Running,
        exit_code: None,
        signal: None,
        timed_out: false,
        output_bytes: 0,
        truncated: false,
        stdin_open: false,
        oom_killed: false,
        pty: false,
    }
}

/// A `GetXattrs` call (protocol version 2).
async fn get_xattrs(
    client: &GuestClient,
) -> Result<Vec<std::collections::BTreeMap<String, cove_guest_protocol::XattrValue>>, GuestError> {
    client
        .get_xattrs(
            vec![GuestPath(b"/tmp/a".to_vec())],
            None,
            "user.e2b.".into(),
        )
        .await
}

fn spawn_request(command_id: &str) -> SpawnRequest {
    SpawnRequest {
        command_id: command_id.into(),
        program: Program::Argv(vec!["/bin/true".into()]),
        env: Default::default(),
        cwd: None,
        user: None,
        stdin: false,
        timeout_ms: None,
        pty: None,
    }
}

#[tokio::test]
async fn an_old_agent_is_spoken_to_in_its_version() {
    const { assert!(PROTOCOL_VERSION > MIN_PROTOCOL_VERSION) };
    let seen = Arc::new(Seen::default());
    let (client, _dir) = old_agent(1, seen.clone()).await;
    client.ping().await.expect("version 1 works");
    let e = get_xattrs(&client)
        .await
        .expect_err("the old agent lacks xattrs");
    assert!(matches!(e, GuestError::TooOld(_)), "{e:?}");
    // The connection still serves, and the agent never saw the v2 request.
    client.ping().await.expect("still works");
    assert_eq!(seen.unexpected.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_spawn_takes_one_round_trip_and_an_old_agent_two() {
    const { assert!(SPAWN_INFO_VERSION > XATTRS_VERSION) };
    for (speaks, gets) in [(1, 1), (XATTRS_VERSION, 1), (SPAWN_INFO_VERSION, 0)] {
        let seen = Arc::new(Seen::default());
        let (client, _dir) = old_agent(speaks, seen.clone()).await;
        let got = client.spawn(spawn_request("c1")).await.expect("spawn");
        assert_eq!(got, info("c1"), "agent of version {speaks}");
        assert_eq!(
            seen.gets.load(Ordering::Relaxed),
            gets,
            "agent of version {speaks}"
        );
        assert_eq!(seen.unexpected.load(Ordering::Relaxed), 0);
    }
}

#[tokio::test]
async fn a_version_2_agent_keeps_xattrs() {
    // The host steps its offer down one version at a time, so an agent of version 2 is not
    // spoken to in version 1 and keeps what version 2 added.
    let seen = Arc::new(Seen::default());
    let (client, _dir) = old_agent(XATTRS_VERSION, seen.clone()).await;
    let e = get_xattrs(&client)
        .await
        .expect_err("the fake agent does not serve xattrs");
    assert!(!matches!(e, GuestError::TooOld(_)), "{e:?}");
    assert_eq!(seen.unexpected.load(Ordering::Relaxed), 1);
}
