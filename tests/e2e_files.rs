//! Uploads and downloads: byte exact at any size (C10), the documented maximum (C10 step 3),
//! atomic replacement when the client goes away, mode and owner, and multi-file upload.

use cove_client::{DownloadOptions, UploadOptions};
use cove_e2e::{client, delete, random_bytes, root_sh, sandbox, sh, sha256_hex};
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

/// Sends a raw request head and body to the API and returns the whole answer (status line,
/// headers, body) once the server closes the connection (at most 30 s); with `close_early`,
/// drops the connection after the bytes instead and returns nothing.
async fn raw_http(head: String, body: &[u8], close_early: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = cove_e2e::server()
        .api_url
        .trim_start_matches("http://")
        .to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    conn.write_all(head.as_bytes()).await.expect("head");
    let _ = conn.write_all(body).await;
    if close_early {
        // Abandon the upload mid-body.
        drop(conn);
        return String::new();
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        conn.read_to_end(&mut answer),
    )
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn put_head(id: &str, path: &str, content_length: u64) -> String {
    let s = cove_e2e::server();
    format!(
        "PUT /v1/sandboxes/{id}/files?path={path} HTTP/1.1\r\nHost: cove\r\n\
         Authorization: Bearer {}\r\nContent-Length: {content_length}\r\nConnection: close\r\n\r\n",
        s.token
    )
}

/// C10 step 3: an upload over the documented maximum is refused (413) before anything is
/// written, and no partial file is left at the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_upload_over_the_maximum_is_413_and_leaves_nothing() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let over = cove_api_types::MAX_UPLOAD_BYTES + 1;
    let answer = raw_http(put_head(&id, "/tmp/big/f", over), &[0u8; 4096], false).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("\"code\":\"payload_too_large\""),
        "{answer}"
    );
    assert!(!c.file_exists(&id, "/tmp/big/f").await.expect("exists"));
    let o = sh(&c, &id, "ls -A /tmp/big 2>/dev/null | wc -l").await;
    assert_eq!(o.stdout_text(), "0\n");
    delete(&c, &id).await;
}

/// An upload whose client goes away mid-body leaves the old file intact and no temporary file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_leaves_the_old_file() {
    let c = client();
    let id = sandbox(&c, "base").await;
    c.upload(&id, "/tmp/keep/f", "old content", &UploadOptions::default())
        .await
        .expect("first upload");
    let partial = random_bytes(2 << 20);
    raw_http(put_head(&id, "/tmp/keep/f", 16 << 20), &partial, true).await;
    // The guest notices the lost upload asynchronously; its temporary file must go.
    let mut left = String::new();
    for _ in 0..100 {
        left = sh(&c, &id, "ls -A /tmp/keep").await.stdout_text();
        if left == "f\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left, "f\n", "a temporary file was left behind");
    let back = c.read_file(&id, "/tmp/keep/f").await.expect("read");
    assert_eq!(back, b"old content");
    delete(&c, &id).await;
}

/// Mode and owner are settable; missing parents are created owned by the requesting user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_set_mode_and_owner() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let as_user = UploadOptions {
        user: Some("user".into()),
        mode: Some(0o750),
    };
    let info = c
        .upload(
            &id,
            "/tmp/own/p1/p2/script.sh",
            "#!/bin/sh\necho run\n",
            &as_user,
        )
        .await
        .expect("upload");
    assert_eq!((info.mode, info.owner.as_str()), (0o750, "user"));
    let o = sh(
        &c,
        &id,
        "stat -c '%U %a' /tmp/own /tmp/own/p1 /tmp/own/p1/p2 /tmp/own/p1/p2/script.sh; \
         /tmp/own/p1/p2/script.sh",
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        "user 755\nuser 755\nuser 755\nuser 750\nrun\n"
    );
    // Replacing keeps the old mode unless a new one is given; root can own a file too.
    let as_root = UploadOptions {
        user: Some("root".into()),
        mode: None,
    };
    let info = c
        .upload(&id, "/tmp/own/p1/p2/script.sh", "#!/bin/sh\n", &as_root)
        .await
        .expect("replace");
    assert_eq!((info.mode, info.owner.as_str()), (0o750, "root"));
    // A mode given in octal text through the raw API means octal.
    let answer = raw_http(put_head(&id, "/tmp/own/m&mode=0600", 1), b"z", false).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        sh(&c, &id, "stat -c %a /tmp/own/m").await.stdout_text(),
        "600\n"
    );
    delete(&c, &id).await;
}

/// `POST files:upload`: several files in one multipart request, each atomic; a failing part
/// stops there, the files before it stay and the error names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_file_upload() {
    use cove_client::UploadFile;
    let c = client();
    let id = sandbox(&c, "base").await;
    let big = random_bytes(3 << 20);
    let files = vec![
        UploadFile {
            path: b"/tmp/multi/a.txt".to_vec(),
            mode: None,
            data: bytes::Bytes::from_static(b"alpha"),
        },
        UploadFile {
            path: b"/tmp/multi/deep/er/big.bin".to_vec(),
            mode: Some(0o600),
            data: bytes::Bytes::from(big.clone()),
        },
        UploadFile {
            path: b"/tmp/multi/odd \xff name".to_vec(),
            mode: None,
            data: bytes::Bytes::new(),
        },
        UploadFile {
            path: b"rel.txt".to_vec(),
            mode: None,
            data: bytes::Bytes::from_static(b"home"),
        },
    ];
    let done = c.upload_files(&id, &files, None).await.expect("upload");
    let paths: Vec<&str> = done.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/tmp/multi/a.txt",
            "/tmp/multi/deep/er/big.bin",
            "/tmp/multi/odd \u{fffd} name",
            "/home/user/rel.txt"
        ]
    );
    assert_eq!(done.files[1].size, big.len() as u64);
    assert_eq!(done.files[1].mode, 0o600);
    assert!(done.files[2].path_b64.is_some());
    let o = sh(
        &c,
        &id,
        "cat /tmp/multi/a.txt; echo; sha256sum /tmp/multi/deep/er/big.bin | cut -d' ' -f1; \
         stat -c %s \"$(printf '/tmp/multi/odd \\377 name')\"; cat rel.txt",
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        format!("alpha\n{}\n0\nhome", sha256_hex(&big))
    );

    // The second part targets a directory: the first is written, the third is not.
    let failing = vec![
        UploadFile {
            path: b"/tmp/multi/one".to_vec(),
            mode: None,
            data: bytes::Bytes::from_static(b"1"),
        },
        UploadFile {
            path: b"/tmp/multi/deep".to_vec(),
            mode: None,
            data: bytes::Bytes::from_static(b"2"),
        },
        UploadFile {
            path: b"/tmp/multi/three".to_vec(),
            mode: None,
            data: bytes::Bytes::from_static(b"3"),
        },
    ];
    let err = c
        .upload_files(&id, &failing, None)
        .await
        .expect_err("a directory is in the way");
    let body = err.api_body().expect("api error");
    assert_eq!(body.code, cove_api_types::ErrorCode::InvalidArgument);
    assert!(
        body.message.contains("file 2 (/tmp/multi/deep)"),
        "{}",
        body.message
    );
    assert!(c.file_exists(&id, "/tmp/multi/one").await.expect("exists"));
    assert!(!c
        .file_exists(&id, "/tmp/multi/three")
        .await
        .expect("exists"));
    let o = sh(&c, &id, "ls -A /tmp/multi | grep -c cove-upload").await;
    assert_eq!(o.stdout_text(), "0\n");

    // curl -F file=@name: without a path part, the part's filename names the file.
    let form =
        "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"from-curl.txt\"\r\n\
                Content-Type: text/plain\r\n\r\ncurl body\r\n--XyZ--\r\n";
    let s = cove_e2e::server();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sandboxes/{id}/files:upload", s.api_url))
        .bearer_auth(&s.token)
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(form)
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 200);
    let root = root_sh(&c, &id, "cat /home/user/from-curl.txt").await;
    assert_eq!(root.stdout_text(), "curl body");
    delete(&c, &id).await;
}
