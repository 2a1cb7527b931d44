//! The raw stdout stream (`Accept: application/octet-stream`): exact bytes (every byte value, a
//! large random payload), stderr left out, resume from a stdout offset, one stream per command.

use bytes::Bytes;
use cove_api_types::{Attachment, CreateCommandRequest};
use cove_client::{Client, ClientError, UploadOptions};
use cove_e2e::{client, delete, random_bytes, sandbox, sha256_hex};
use futures::StreamExt;

/// Reads the whole raw stdout stream from `offset`.
async fn read_all(c: &Client, att: &Attachment, offset: u64) -> Vec<u8> {
    let mut stream = Box::pin(c.attach_binary(att, offset).await.expect("binary stream"));
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.expect("chunk"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_stdout_is_exact_and_resumable() {
    let c = client();
    let id = sandbox(&c, "tiny").await;

    // Every byte value, then stderr (not in the stream), then 6 MiB of random bytes.
    let all256: Vec<u8> = (0..=255u8).collect();
    let big = random_bytes(6 << 20);
    for (path, data) in [("/tmp/all256", &all256), ("/tmp/big", &big)] {
        c.upload(
            &id,
            path,
            Bytes::from(data.clone()),
            &UploadOptions::default(),
        )
        .await
        .expect("upload");
    }
    let req = CreateCommandRequest {
        shell: Some("cat /tmp/all256; echo to-stderr >&2; cat /tmp/big; exit 3".into()),
        ..Default::default()
    };
    let resp = c.create_command(&id, &req).await.expect("start");
    let mut expected = all256.clone();
    expected.extend_from_slice(&big);

    let got = read_all(&c, &resp.attachment, 0).await;
    assert_eq!(got.len(), expected.len());
    assert_eq!(sha256_hex(&got), sha256_hex(&expected));
    assert_eq!(&got[..256], &all256[..]);
    // The exit is the command's, read from the API once the body ended.
    let cmd = c
        .get_command(
            &id,
            &resp.command.id,
            Some(std::time::Duration::from_secs(30)),
        )
        .await
        .expect("command");
    assert_eq!(cmd.exit_code, Some(3));

    // Resume from stdout offsets (stderr does not count): exactly the remaining bytes.
    for offset in [
        1usize,
        255,
        256,
        257,
        1 << 20,
        expected.len() - 1,
        expected.len(),
    ] {
        let again = read_all(&c, &resp.attachment, offset as u64).await;
        assert_eq!(again.len(), expected.len() - offset, "offset {offset}");
        assert!(again == expected[offset..], "offset {offset}: bytes differ");
    }

    // One binary stream per command at a time: a second is refused while the first is open;
    // the SSE stream is not affected.
    let req = CreateCommandRequest {
        shell: Some("printf start; sleep 2; printf end".into()),
        ..Default::default()
    };
    let resp = c.create_command(&id, &req).await.expect("start");
    let mut first = Box::pin(c.attach_binary(&resp.attachment, 0).await.expect("first"));
    let head = first.next().await.expect("a chunk").expect("bytes");
    assert_eq!(&head[..], b"start");
    match c.attach_binary(&resp.attachment, 0).await {
        Err(ClientError::Api { status, body }) => {
            assert_eq!(status, 409);
            assert_eq!(body.code.as_str(), "failed_precondition");
        }
        Err(e) => panic!("expected 409 failed_precondition, got {e}"),
        Ok(_) => panic!("a second binary stream was opened"),
    }
    let mut rest = Vec::new();
    while let Some(chunk) = first.next().await {
        rest.extend_from_slice(&chunk.expect("chunk"));
    }
    assert_eq!(rest, b"end");
    drop(first);
    // Freed once the first ended.
    assert_eq!(read_all(&c, &resp.attachment, 5).await, b"end");

    delete(&c, &id).await;
}
