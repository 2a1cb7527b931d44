//! Output and watch streams through the services: a command's collected output (head and
//! tail within a budget), and a directory watch fed by writes.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use cove_api_types::{CommandState, CreateCommandRequest, FileEventKind};
use cove_control_plane::{SandboxPath, WatchOptions, WriteOptions};
use cove_test_support::Script;
use futures::StreamExt;

use crate::harness::as_system;
use crate::harness::Harness;

fn shell(s: &str) -> CreateCommandRequest {
    CreateCommandRequest {
        shell: Some(s.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_commands_output_is_collected_with_its_head_and_tail() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.script(
            "build",
            Script::exit(1).stdout("0123456789").stderr("abcdefghij"),
        );
        let cmd =
            h.cp.create_command(&id, shell("build"))
                .await
                .expect("spawn");
        let cid = cmd.command.id;

        let all =
            h.cp.command_output(&id, &cid, None, None)
                .await
                .expect("output");
        assert_eq!(all.command.state, CommandState::Exited);
        assert_eq!(all.command.exit_code, Some(1));
        assert_eq!(B64.decode(&all.stdout).expect("b64"), b"0123456789");
        assert_eq!(B64.decode(&all.stderr).expect("b64"), b"abcdefghij");
        assert!(!all.truncated);

        // 8 bytes of 20: the first 4 and the last 4, and the 12 between named.
        let cut =
            h.cp.command_output(&id, &cid, None, Some(8))
                .await
                .expect("output");
        assert!(cut.truncated);
        assert_eq!(B64.decode(&cut.stdout).expect("b64"), b"0123");
        assert_eq!(B64.decode(&cut.stderr).expect("b64"), b"ghij");
        let omitted = cut.omitted.expect("omitted");
        assert_eq!((omitted.offset, omitted.len), (4, 12));
    })
    .await;
}

#[tokio::test]
async fn a_watch_sees_files_written_in_its_directory() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let tmp = SandboxPath(b"/tmp".to_vec());
        let options = WatchOptions::default();
        let mut events =
            h.cp.watch_files(&id, tmp, None, options)
                .await
                .expect("watch");
        for (path, data) in [
            ("/tmp/a.txt", "1"),
            ("/tmp/a.txt", "2"),
            ("/home/user/b", "3"),
        ] {
            let w = SandboxPath(path.as_bytes().to_vec());
            let body = futures::stream::iter([Ok(Bytes::from(data))]).boxed();
            let options = WriteOptions::default();
            h.cp.write_file(&id, w, None, options, None, body)
                .await
                .expect("write");
        }
        let first = events.next().await.expect("batch").expect("ok");
        assert_eq!(first[0].event, FileEventKind::Create);
        assert_eq!(first[0].path, "/tmp/a.txt");
        let second = events.next().await.expect("batch").expect("ok");
        assert_eq!(second[0].event, FileEventKind::Write);
        // Nothing from outside the watched directory.
        let more = futures::FutureExt::now_or_never(events.next());
        assert!(more.is_none(), "{more:?}");
    })
    .await;
}
