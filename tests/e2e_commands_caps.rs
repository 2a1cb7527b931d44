//! Output caps with small limits (this binary's server keeps 1 MiB per command: the first
//! 768 KiB and the last 256 KiB, 64 KiB in memory): the head and the tail of a long output are
//! kept byte for byte, offsets stay exact across the dropped middle (readers get a gap), the
//! collect API answers head + tail, and the disk used stays within the cap.

use std::time::{Duration, Instant};

use base64::Engine as _;
use cove_api_types::{Command, CommandState, CreateCommandRequest};
use cove_client::{AttachEvent, Client};
use cove_e2e::{client_of, delete, sandbox, server_with, Server};
use futures::StreamExt;

const CAP: u64 = 1 << 20;
const TAIL: u64 = 256 * 1024;
const HEAD: u64 = CAP - TAIL;

fn small_caps(cfg: &mut cove_server::Config) {
    cfg.command_output = cove_server::OutputLimits {
        memory_bytes: 64 * 1024,
        cap_bytes: CAP,
        tail_bytes: Some(TAIL),
    };
}

fn srv() -> &'static Server {
    server_with(small_caps)
}

/// `seq 1 N` as the shell prints it.
fn seq(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

async fn wait_exited(c: &Client, sb: &str, cid: &str) -> Command {
    loop {
        let cmd = c
            .get_command(sb, cid, Some(Duration::from_secs(20)))
            .await
            .expect("get");
        if cmd.state == CommandState::Exited {
            return cmd;
        }
    }
}

/// Reads an attachment from `offset` to the exit: stdout bytes and gaps.
async fn read(
    c: &Client,
    att: &cove_api_types::Attachment,
    offset: u64,
) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut events = Box::pin(c.attach(att, offset));
    let (mut out, mut gaps) = (Vec::new(), Vec::new());
    let mut at = offset;
    while let Some(ev) = events.next().await {
        match ev.expect("event") {
            AttachEvent::Stdout { offset, data } | AttachEvent::Stderr { offset, data } => {
                assert_eq!(offset, at, "offsets are contiguous");
                at += data.len() as u64;
                out.extend_from_slice(&data);
            }
            AttachEvent::Gap { offset, len } => {
                assert_eq!(offset, at, "a gap starts where the reader is");
                at += len;
                gaps.push((offset, len));
            }
            AttachEvent::Exit(_) => break,
        }
    }
    (out, gaps)
}

fn run_dir_bytes(sandbox: &str) -> u64 {
    let dir = srv()
        .data_dir
        .join("sandboxes")
        .join(sandbox)
        .join("run/output");
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_output_keeps_its_head_and_tail_with_exact_offsets() {
    let c = client_of(srv());
    let id = sandbox(&c, "base").await;
    let expected = seq(700_000); // 4.9 MB
    let total = expected.len() as u64;
    let started = c
        .create_command(
            &id,
            &CreateCommandRequest {
                argv: Some(vec!["seq".into(), "1".into(), "700000".into()]),
                ..Default::default()
            },
        )
        .await
        .expect("start");
    let cmd = wait_exited(&c, &id, &started.command.id).await;
    assert_eq!(cmd.exit_code, Some(0));
    assert_eq!(cmd.output_bytes, total, "every byte is counted");
    assert!(cmd.truncated);
    assert!(
        run_dir_bytes(&id) <= CAP + TAIL,
        "{} bytes on disk",
        run_dir_bytes(&id)
    );

    // From the start: the head, a gap, the tail; every kept byte exact.
    let (got, gaps) = read(&c, &started.attachment, 0).await;
    assert_eq!(gaps, vec![(HEAD, total - CAP)]);
    let mut want = expected[..HEAD as usize].to_vec();
    want.extend_from_slice(&expected[(total - TAIL) as usize..]);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "kept bytes differ");

    // From inside the dropped range: the rest of the gap, then the tail.
    let (got, gaps) = read(&c, &started.attachment, HEAD + 1000).await;
    assert_eq!(gaps, vec![(HEAD + 1000, total - TAIL - HEAD - 1000)]);
    assert!(got == expected[(total - TAIL) as usize..]);
    // From inside the tail: exact.
    let (got, gaps) = read(&c, &started.attachment, total - 100).await;
    assert!(gaps.is_empty());
    assert!(got == expected[(total - 100) as usize..]);

    // Collected in one answer of 64 KiB: 32 KiB of head, 32 KiB of tail, the range between.
    let b64 = base64::engine::general_purpose::STANDARD;
    let out = c
        .command_output(&id, &started.command.id, None, Some(64 * 1024))
        .await
        .expect("collect");
    let stdout = b64.decode(&out.stdout).expect("base64");
    let omitted = out.omitted.expect("omitted");
    assert!(out.truncated);
    assert_eq!(
        (omitted.offset, omitted.len),
        (32 * 1024, total - 64 * 1024)
    );
    assert_eq!(omitted.stdout_at, 32 * 1024);
    let mut want = expected[..32 * 1024].to_vec();
    want.extend_from_slice(&expected[(total - 32 * 1024) as usize..]);
    assert!(stdout == want);
    // With a budget over the cap, the answer's gap is the server's.
    let out = c
        .command_output(&id, &started.command.id, None, Some(16 << 20))
        .await
        .expect("collect");
    let omitted = out.omitted.expect("omitted");
    assert_eq!((omitted.offset, omitted.len), (HEAD, total - CAP));
    assert_eq!(b64.decode(&out.stdout).expect("base64").len() as u64, CAP);

    // Forgetting the command deletes its kept output.
    c.forget_command(&id, &started.command.id)
        .await
        .expect("forget");
    assert_eq!(run_dir_bytes(&id), 0);
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_keeps_up_gets_every_byte_of_a_paced_output() {
    let c = client_of(srv());
    let id = sandbox(&c, "base").await;
    // 2 MiB written slowly (32 KiB every 20 ms): a live reader keeps up past the cap, with the
    // 256 KiB tail as its margin (160 ms of output).
    let started = c
        .create_command(
            &id,
            &CreateCommandRequest {
                shell: Some(
                    "for i in $(seq 1 64); do head -c 32768 /dev/zero | tr '\\000' x; \
                     sleep 0.02; done; echo END"
                        .into(),
                ),
                ..Default::default()
            },
        )
        .await
        .expect("start");
    let t0 = Instant::now();
    let (got, gaps) = read(&c, &started.attachment, 0).await;
    assert!(gaps.is_empty(), "{gaps:?}");
    assert_eq!(got.len(), 64 * 32768 + 4);
    assert!(got.ends_with(b"xEND\n"));
    let cmd = wait_exited(&c, &id, &started.command.id).await;
    assert!(cmd.truncated, "later readers miss the middle");
    eprintln!("paced 2 MiB read live in {:?}", t0.elapsed());
    delete(&c, &id).await;
}
