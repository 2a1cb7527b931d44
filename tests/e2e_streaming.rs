//! Output streams live, and a re-attach from an offset returns exactly the remaining bytes.

use std::time::{Duration, Instant};

use cove_api_types::CreateCommandRequest;
use cove_e2e::{client, collect, delete, sandbox, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_live_and_resumable() {
    let c = client();
    let id = sandbox(&c, "tiny").await;

    // A line every 200 ms: the first line reaches the client well before the command exits.
    let t0 = Instant::now();
    let req = CreateCommandRequest {
        shell: Some("for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; sleep 0.2; done".into()),
        ..Default::default()
    };
    let resp = c.create_command(&id, &req).await.expect("start");
    let out = collect(&c, &resp.attachment, 0, t0).await;
    let expected: String = (1..=10).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(out.stdout_text(), expected);
    let (first_at, src, first) = out.chunks.first().cloned().expect("a chunk");
    assert_eq!(src, Source::Stdout);
    assert!(first.starts_with(b"line-1\n"), "{first:?}");
    assert!(
        out.elapsed >= Duration::from_millis(1800),
        "ran {:?}",
        out.elapsed
    );
    assert!(
        first_at + Duration::from_millis(1000) < out.elapsed,
        "first line at {first_at:?}, exit at {:?}",
        out.elapsed
    );

    // Re-attach after the end from several offsets: exactly the remaining bytes.
    let all = out.stdout.clone();
    for offset in [0usize, 1, 7, 8, 30, all.len() - 1, all.len()] {
        let again = collect(&c, &resp.attachment, offset as u64, Instant::now()).await;
        assert_eq!(again.stdout, &all[offset..], "offset {offset}");
        assert_eq!(again.command.exit_code, Some(0));
    }

    // Re-attach while it runs: a client that leaves and comes back misses nothing.
    let req = CreateCommandRequest {
        shell: Some("for i in 1 2 3 4 5; do printf 'x%s' $i; sleep 0.2; done".into()),
        ..Default::default()
    };
    let resp = c.create_command(&id, &req).await.expect("start");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let out = collect(&c, &resp.attachment, 2, Instant::now()).await;
    assert_eq!(out.stdout_text(), "x2x3x4x5");

    delete(&c, &id).await;
}
