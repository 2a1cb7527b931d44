//! Commands through the services: create, get, list, signal, kill, forget, and node errors
//! mapped to API codes.

use cove_api_types::{CommandState, CreateCommandRequest, ErrorCode, SandboxState};
use cove_control_plane::{LifecycleVerb::*, ServiceError};
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault, Script};

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn argv(args: &[&str]) -> CreateCommandRequest {
    CreateCommandRequest {
        argv: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn field_of(e: ServiceError) -> String {
    match e {
        ServiceError::Invalid(i) => i.field,
        other => panic!("not invalid_argument: {other:?}"),
    }
}

#[tokio::test]
async fn a_command_is_started_inspected_listed_and_forgotten() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node
            .script("echo hi", Script::exit(3).stdout("hi\n").stderr("err\n"));
        let created =
            h.cp.create_command(&id, argv(&["echo", "hi"]))
                .await
                .expect("create");
        let cid = created.command.id.clone();
        assert!(created
            .attachment
            .url
            .ends_with(&format!("/v1/attach/{cid}")));
        assert_eq!(
            h.cp.authorize_attachment(&cid, &created.attachment.token)
                .await
                .expect("token"),
            id
        );
        assert_eq!(created.command.cwd, "/home/user");
        assert_eq!(created.command.user, "user");

        let got = h.cp.get_command(&id, &cid, None).await.expect("get");
        assert_eq!(got.state, CommandState::Exited);
        assert_eq!(got.exit_code, Some(3));
        assert_eq!(got.output_bytes, 7);
        let listed = h.cp.list_commands(&id, None).await.expect("list");
        assert_eq!(listed.commands.len(), 1);
        let running =
            h.cp.list_commands(&id, Some(CommandState::Running))
                .await
                .expect("list");
        assert!(running.commands.is_empty());

        h.cp.forget_command(&id, &cid).await.expect("forget");
        assert_eq!(
            code(h.cp.get_command(&id, &cid, None).await),
            ErrorCode::CommandNotFound
        );
        assert_eq!(
            code(h.cp.forget_command(&id, &cid).await),
            ErrorCode::CommandNotFound
        );
        assert_eq!(
            h.node.count(Call::Forget),
            1,
            "the second forget stops at the store"
        );
    })
    .await;
}

#[tokio::test]
async fn a_running_command_is_killed_or_signalled_and_forgotten_only_once_ended() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.script("sleep 100", Script::running());
        let a =
            h.cp.create_command(&id, argv(&["sleep", "100"]))
                .await
                .expect("a");
        let b =
            h.cp.create_command(&id, argv(&["sleep", "100"]))
                .await
                .expect("b");
        assert_eq!(a.command.state, CommandState::Running);
        assert_ne!(a.command.pid, b.command.pid);
        let running =
            h.cp.list_commands(&id, Some(CommandState::Running))
                .await
                .expect("list");
        assert_eq!(running.commands.len(), 2);

        assert_eq!(
            code(h.cp.forget_command(&id, &a.command.id).await),
            ErrorCode::FailedPrecondition
        );
        let killed =
            h.cp.kill_command(&id, &a.command.id, Some(100))
                .await
                .expect("kill");
        assert_eq!(killed.state, CommandState::Exited);
        assert_eq!(killed.signal.as_deref(), Some("SIGTERM"));
        h.cp.forget_command(&id, &a.command.id)
            .await
            .expect("forget");

        let sig =
            h.cp.signal_command(&id, &b.command.id, "INT")
                .await
                .expect("signal");
        assert_eq!(sig.signal.as_deref(), Some("SIGINT"));
        assert_eq!(
            code(h.cp.signal_command(&id, &b.command.id, "SIGNOPE").await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(h.cp.kill_command(&id, &b.command.id, Some(60_001)).await),
            ErrorCode::InvalidArgument
        );
    })
    .await;
}

#[tokio::test]
async fn node_refusals_of_a_spawn_name_the_field() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let mut req = argv(&["ls"]);
        req.cwd = Some("/no/such/dir".into());
        let err =
            h.cp.create_command(&id, req)
                .await
                .expect_err("missing cwd");
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert_eq!(field_of(err), "cwd");

        let mut req = argv(&["ls"]);
        req.user = Some("nobody".into());
        let err =
            h.cp.create_command(&id, req)
                .await
                .expect_err("unknown user");
        assert_eq!(field_of(err), "user");

        // Refused spawns leave no command behind.
        let listed = h.cp.list_commands(&id, None).await.expect("list");
        assert!(listed.commands.is_empty());
        // Checked before the node: two programs at once.
        let both = CreateCommandRequest {
            argv: Some(vec!["ls".into()]),
            shell: Some("ls".into()),
            ..Default::default()
        };
        let err = h.cp.create_command(&id, both).await.expect_err("both");
        assert_eq!(field_of(err), "argv");
        assert_eq!(h.node.count(Call::Spawn), 2);
    })
    .await;
}

#[tokio::test]
async fn node_errors_map_to_their_api_codes() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let cmd =
            h.cp.create_command(&id, argv(&["true"]))
                .await
                .expect("create");
        let cid = cmd.command.id;
        let cases = [
            (
                NodeError::CommandNotFound(cid.clone()),
                ErrorCode::CommandNotFound,
            ),
            (
                NodeError::SandboxNotFound(id.clone()),
                ErrorCode::Unavailable,
            ),
            (
                NodeError::AgentUnavailable("gone".into()),
                ErrorCode::Unavailable,
            ),
            (NodeError::Internal("disk".into()), ErrorCode::Internal),
        ];
        for (err, want) in cases {
            h.node.inject(Call::Command, Fault::fail(err.clone()));
            assert_eq!(
                code(h.cp.get_command(&id, &cid, None).await),
                want,
                "{err:?}"
            );
        }
        h.node.inject(
            Call::Spawn,
            Fault::fail(NodeError::SpawnFailed("fork: EAGAIN".into())),
        );
        assert_eq!(
            code(h.cp.create_command(&id, argv(&["true"])).await),
            ErrorCode::Unavailable
        );
        // Another sandbox's command id is unknown here.
        let other = h.running().await;
        assert_eq!(
            code(h.cp.get_command(&other, &cid, None).await),
            ErrorCode::CommandNotFound
        );
    })
    .await;
}

#[tokio::test]
async fn commands_need_a_running_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert_eq!(
            code(h.cp.create_command(&id, argv(&["true"])).await),
            ErrorCode::SandboxNotRunning
        );
        assert_eq!(
            code(h.cp.list_commands(&id, None).await),
            ErrorCode::SandboxNotRunning
        );
        assert_eq!(
            code(h.cp.create_command("sb-nope", argv(&["true"])).await),
            ErrorCode::SandboxNotFound
        );
        assert_eq!(h.node.count(Call::Spawn), 0);
    })
    .await;
}
