//! Streamed upload and download, byte exact, any size (C10's sizes).

use cove_client::{DownloadOptions, UploadOptions};
use cove_e2e::{client, delete, random_bytes, sandbox, sh, sha256_hex};
use futures::TryStreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_and_downloads_are_byte_exact() {
    let c = client();
    let id = sandbox(&c, "base").await;
    for size in [0usize, 1, 18431, 18433, 1 << 20, (1 << 20) + 1, 64 << 20] {
        let data = random_bytes(size);
        let path = format!("/tmp/up/f_{size}");
        let info = c
            .upload(&id, &path, data.clone(), &UploadOptions::default())
            .await
            .expect("upload");
        assert_eq!(info.size, size as u64);
        let o = sh(
            &c,
            &id,
            &format!("stat -c %s {path}; sha256sum {path} | cut -d' ' -f1"),
        )
        .await;
        assert_eq!(o.stdout_text(), format!("{size}\n{}\n", sha256_hex(&data)));
        let back: Vec<u8> = c
            .download(&id, &path, &DownloadOptions::default())
            .await
            .expect("download")
            .map_ok(|b| b.to_vec())
            .try_concat()
            .await
            .expect("bytes");
        assert_eq!(back.len(), size);
        assert!(back == data, "download of {size} bytes differs");
    }
    sh(
        &c,
        &id,
        ": > /tmp/empty; printf '\\000\\377\\376\\200' > /tmp/bin",
    )
    .await;
    let read = |p: &'static str| {
        let c = c.clone();
        let id = id.clone();
        async move {
            c.download(&id, p, &DownloadOptions::default())
                .await
                .expect("download")
                .map_ok(|b| b.to_vec())
                .try_concat()
                .await
                .expect("bytes")
        }
    };
    assert!(read("/tmp/empty").await.is_empty());
    assert_eq!(read("/tmp/bin").await, vec![0x00, 0xFF, 0xFE, 0x80]);
    let ranged: Vec<u8> = c
        .download(
            &id,
            "/tmp/bin",
            &DownloadOptions {
                offset: Some(1),
                length: Some(2),
                ..Default::default()
            },
        )
        .await
        .expect("download")
        .map_ok(|b| b.to_vec())
        .try_concat()
        .await
        .expect("bytes");
    assert_eq!(ranged, vec![0xFF, 0xFE]);
    let err = c
        .download(&id, "/tmp/no-such-file", &DownloadOptions::default())
        .await
        .err()
        .expect("404");
    assert_eq!(err.status(), Some(404));
    delete(&c, &id).await;
}
