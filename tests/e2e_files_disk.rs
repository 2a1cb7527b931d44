//! C14 on a sandbox with a disk of its own (`resources.disk_mib`): a full disk fails writes with
//! "No space left on device" and uploads with `507 no_space` (also when it fills in the middle
//! of an upload, which leaves no temporary file), while commands, reads, pause/resume and
//! suspend/wake go on working; a deleted `/tmp` breaks neither commands nor files. Also: the
//! disk's cost at create, and that nothing of it (mount, loop device) outlives the sandbox.

use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, ErrorCode, ResourcesRequest};
use cove_client::{Client, UploadOptions};
use cove_e2e::{client, delete, random_bytes, root_sh, sandbox, sandbox_with, sh};

fn with_disk(mib: u64) -> CreateSandboxRequest {
    CreateSandboxRequest {
        resources: Some(ResourcesRequest {
            disk_mib: Some(mib),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn wait_op(c: &Client, op: cove_api_types::Operation) {
    let op = c
        .wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("operation finishes");
    assert_eq!(
        op.state,
        cove_api_types::OperationState::Succeeded,
        "{:?}",
        op.error
    );
}

/// The loop devices backed by `image` (also when the file is already deleted).
fn loops_of(image: &std::path::Path) -> String {
    let out = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup");
    let image = image.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&image))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Free KiB on the sandbox's root filesystem.
async fn free_kib(c: &Client, id: &str) -> i64 {
    let o = sh(c, id, "df -k --output=avail / | tail -1").await;
    o.stdout_text().trim().parse().expect("df")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c14_a_full_disk_fails_writes_cleanly_and_the_sandbox_recovers() {
    let c = client();
    // Warm up (template, page cache), then measure a create without and with a disk.
    let warm = sandbox(&c, "base").await;
    delete(&c, &warm).await;
    let t = Instant::now();
    let plain = sandbox(&c, "base").await;
    let plain_create = t.elapsed();
    let t = Instant::now();
    let id = sandbox_with(&c, "base", with_disk(128)).await;
    let disk_create = t.elapsed();
    println!(
        "create: {plain_create:?} without a disk, {disk_create:?} with a 128 MiB disk \
         ({:+} ms)",
        disk_create.as_millis() as i64 - plain_create.as_millis() as i64
    );
    delete(&c, &plain).await;
    let got = c.get_sandbox(&id).await.expect("get");
    assert_eq!(got.resources.disk_mib, Some(128));
    let dir = cove_e2e::server().data_dir.join("sandboxes").join(&id);
    let image = dir.join("disk.img");
    assert_eq!(std::fs::metadata(&image).expect("image").len(), 128 << 20);
    assert!(!loops_of(&image).is_empty(), "the image is loop-mounted");
    let o = sh(&c, &id, "df -k --output=size / | tail -1").await;
    let size_kib: u64 = o.stdout_text().trim().parse().expect("df");
    assert!(
        (100_000..=131_072).contains(&size_kib),
        "the sandbox's root is its own disk: {size_kib} KiB"
    );

    // Step 1: fill it.
    let o = sh(
        &c,
        &id,
        "dd if=/dev/zero of=/home/user/fill bs=1M; echo rc=$?",
    )
    .await;
    assert!(
        o.stderr_text().contains("No space left on device"),
        "{}",
        o.stderr_text()
    );
    assert!(o.stdout_text().starts_with("rc=") && o.stdout_text() != "rc=0\n");
    let filled = sh(&c, &id, "stat -c %s /home/user/fill")
        .await
        .stdout_text();

    // Step 2: commands and reads work; a write is a clear 507, quickly.
    assert_eq!(
        sh(&c, &id, "echo still-alive").await.stdout_text(),
        "still-alive\n"
    );
    let hostname = c.read_file(&id, "/etc/hostname").await.expect("read");
    assert_eq!(hostname, format!("{id}\n").as_bytes());
    let t = Instant::now();
    let err = c
        .upload(&id, "/home/user/small.txt", "x", &UploadOptions::default())
        .await
        .expect_err("the disk is full");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(err.status(), Some(507));
    let body = err.api_body().expect("api error");
    assert_eq!(body.code, ErrorCode::NoSpace);
    assert!(
        body.message.contains("No space left on device"),
        "{}",
        body.message
    );
    assert!(!c
        .file_exists(&id, "/home/user/small.txt")
        .await
        .expect("exists"));

    // Step 3: pause and resume; the data is intact.
    wait_op(&c, c.pause_sandbox(&id).await.expect("pause")).await;
    wait_op(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    assert_eq!(
        sh(&c, &id, "stat -c %s /home/user/fill")
            .await
            .stdout_text(),
        filled
    );
    assert_eq!(
        c.read_file(&id, "/etc/hostname").await.expect("read"),
        hostname
    );

    // Step 4: free the space; the write succeeds.
    sh(&c, &id, "rm -f /home/user/fill").await;
    c.upload(&id, "/home/user/small.txt", "x", &UploadOptions::default())
        .await
        .expect("write after freeing space");
    assert_eq!(
        c.read_file(&id, "/home/user/small.txt")
            .await
            .expect("read"),
        b"x"
    );

    // An upload larger than the free space fails in the middle: 507, and no temporary file.
    let free_before = free_kib(&c, &id).await;
    let big = random_bytes(160 << 20);
    let err = c
        .upload(&id, "/home/user/big.bin", big, &UploadOptions::default())
        .await
        .expect_err("larger than the disk");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::NoSpace),
        "{err}"
    );
    assert_eq!(
        sh(
            &c,
            &id,
            "ls -A /home/user | grep -c -e cove-upload -e big.bin"
        )
        .await
        .stdout_text(),
        "0\n"
    );
    let free_after = free_kib(&c, &id).await;
    assert!(
        (free_before - free_after).abs() < 1024,
        "the partial upload's space is freed: {free_before} KiB before, {free_after} KiB after"
    );

    // Step 5: a deleted /tmp breaks nothing of the agent's.
    let o = root_sh(&c, &id, "rm -rf /tmp; echo gone").await;
    assert_eq!(o.stdout_text(), "gone\n");
    assert_eq!(sh(&c, &id, "echo ok").await.stdout_text(), "ok\n");
    assert_eq!(sh(&c, &id, "printf abc").await.stdout, b"abc");
    c.upload(&id, "/home/user/after.txt", "y", &UploadOptions::default())
        .await
        .expect("write after rm -rf /tmp");

    // Suspend and wake: the files come back onto a new disk of the same size.
    wait_op(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    assert!(loops_of(&image).is_empty(), "suspend detached the disk");
    wait_op(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    assert_eq!(
        c.read_file(&id, "/home/user/after.txt")
            .await
            .expect("read"),
        b"y"
    );
    assert_eq!(
        c.read_file(&id, "/home/user/small.txt")
            .await
            .expect("read"),
        b"x"
    );
    assert!(
        !c.file_exists(&id, "/tmp").await.expect("exists"),
        "the deletion was kept"
    );
    assert!(!loops_of(&image).is_empty());

    delete(&c, &id).await;
    assert!(
        loops_of(&image).is_empty(),
        "a loop device outlived the sandbox"
    );
    assert!(!dir.exists(), "the sandbox dir outlived the sandbox");
}
