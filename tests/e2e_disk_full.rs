//! Issue 12, faults: the server's data dir on a small filesystem of its own (a 256 MiB ext4
//! image on a loop device, made by the test and removed at the end, even on failure). Once
//! it is full, an upload and a create answer `507 no_space` with the usual error body (code,
//! message, request id) and leave nothing half-written (no partial file, no sandbox record or
//! directory); once space returns, the same requests succeed.
//!
//! Sandboxes here have no own disk (`COVE_E2E_DEFAULT_DISK_MIB=0`): their files live on the
//! data dir, so the sandbox sees the data dir's `ENOSPC` itself. (With an own disk, a sparse
//! image on a full data dir fails its writes with I/O errors instead; the own disk is sized so
//! that does not happen on a data dir with room.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::Duration;

use cove_api_types::{CreateSandboxRequest, ErrorCode, OperationState};
use cove_client::{Client, ClientError, ListSandboxes, UploadOptions};
use cove_e2e::server_process::{dir_names, ServerProcess};

const IMAGE_MIB: u64 = 256;

/// A loop-mounted ext4 image; unmounted and removed on drop.
struct SmallDisk {
    dir: PathBuf,
    mnt: PathBuf,
}

fn run(cmd: &mut Process) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SmallDisk {
    fn new() -> SmallDisk {
        let dir = tempfile::Builder::new()
            .prefix("cove-diskfull-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let img = dir.join("disk.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).expect("mount point");
        let disk = SmallDisk { dir, mnt };
        let f = std::fs::File::create(&img).expect("image");
        f.set_len(IMAGE_MIB * 1024 * 1024).expect("size");
        drop(f);
        // No blocks reserved for root: the server runs as root and must see the disk full.
        run(Process::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&img));
        run(Process::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&disk.mnt));
        disk
    }

    /// Fills the filesystem: big writes, then small ones, until `ENOSPC` (bounded by its size).
    fn fill(&self) {
        let mut f = std::fs::File::create(self.mnt.join("filler")).expect("filler");
        for size in [1 << 20, 4096, 512] {
            let chunk = vec![0x5a_u8; size];
            for _ in 0..(IMAGE_MIB as usize * (1 << 20) / size + 1) {
                if f.write_all(&chunk).and_then(|()| f.sync_data()).is_err() {
                    break;
                }
            }
        }
        // Also the last free inodes' worth of directory blocks.
        for i in 0..10_000 {
            if std::fs::create_dir(self.mnt.join(format!("filler-dir-{i}"))).is_err() {
                break;
            }
        }
    }

    fn free(&self) {
        let _ = std::fs::remove_file(self.mnt.join("filler"));
        for i in 0..10_000 {
            if std::fs::remove_dir(self.mnt.join(format!("filler-dir-{i}"))).is_err() {
                break;
            }
        }
    }

    fn available_bytes(&self) -> u64 {
        let out = Process::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.mnt)
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(u64::MAX)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let umount = Process::new("umount").arg(&self.mnt).output();
        if !umount.is_ok_and(|o| o.status.success()) {
            let _ = Process::new("umount").arg("-l").arg(&self.mnt).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Asserts `err` is `507 no_space` with a complete error body.
fn assert_no_space(err: &ClientError, what: &str) {
    assert_eq!(err.status(), Some(507), "{what}: {err}");
    let body = err
        .api_body()
        .unwrap_or_else(|| panic!("{what}: no error body: {err}"));
    assert_eq!(body.code, ErrorCode::NoSpace, "{what}: {body:?}");
    assert!(!body.message.is_empty(), "{what}: a message");
    assert!(!body.request_id.is_empty(), "{what}: a request id");
    assert!(
        !body.message.contains("/tmp/") && !body.message.contains("/var/"),
        "{what}: no host path in {:?}",
        body.message
    );
}

async fn count_sandboxes(c: &Client) -> usize {
    let filter = ListSandboxes {
        limit: Some(200),
        ..Default::default()
    };
    c.list_sandboxes(&filter)
        .await
        .expect("list")
        .sandboxes
        .len()
}

async fn create(c: &Client) -> Result<String, ClientError> {
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let resp = c.create_sandbox(&req, None).await?;
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    Ok(resp.sandbox.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_dir_answers_507_no_space_and_recovers() {
    let disk = SmallDisk::new();
    let data_dir = disk.mnt.join("data");
    std::fs::create_dir_all(&data_dir).expect("data dir");
    let mut server = ServerProcess::on(
        Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")),
        data_dir.clone(),
        30_000,
    );
    // Its log on the full disk too, as a server logging to its data dir's filesystem would.
    server.env = vec![("COVE_E2E_DEFAULT_DISK_MIB".into(), "0".into())];
    let c = server.start().await;
    cove_e2e::build_template(&c, "tiny").await;
    let id = create(&c).await.expect("create with room");
    let before_files = c
        .list_files(&id, "/home/user", 1)
        .await
        .expect("list")
        .entries
        .len();
    let sandboxes = count_sandboxes(&c).await;
    let dirs = dir_names(&data_dir.join("sandboxes"));

    disk.fill();
    let left = disk.available_bytes();
    assert!(left < 64 * 1024, "the disk is full: {left} bytes left");
    // Refused at once; the server drains the rest of the body so the client reads the 507.
    let data = cove_e2e::random_bytes(4 << 20);
    let path = "/home/user/big.bin";
    let err = c
        .upload(&id, path, data.clone(), &UploadOptions::default())
        .await
        .expect_err("an upload on a full disk fails");
    assert!(
        err.status().is_some(),
        "upload: {err:?}; server log: {}",
        server.log_tail()
    );
    assert_no_space(&err, "upload");
    assert!(
        !c.file_exists(&id, path).await.expect("exists"),
        "no partial file"
    );
    assert_eq!(
        c.list_files(&id, "/home/user", 1)
            .await
            .expect("list")
            .entries
            .len(),
        before_files,
        "no temporary file left in the directory"
    );
    let err = create(&c).await.expect_err("a create on a full disk fails");
    assert_no_space(&err, "create");
    assert_eq!(count_sandboxes(&c).await, sandboxes, "no sandbox record");
    assert_eq!(
        dir_names(&data_dir.join("sandboxes")),
        dirs,
        "no sandbox directory"
    );

    disk.free();
    c.upload(&id, path, data.clone(), &UploadOptions::default())
        .await
        .expect("the upload succeeds once space returns");
    assert_eq!(c.read_file(&id, path).await.expect("download"), data);
    let second = create(&c).await.unwrap_or_else(|e| {
        panic!(
            "the create succeeds once space returns: {e:?}\nserver log: {}",
            server.log_problems()
        )
    });
    assert_eq!(
        cove_e2e::sh(&c, &second, "echo ok").await.stdout_text(),
        "ok\n"
    );
    for s in [id, second] {
        cove_e2e::delete(&c, &s).await;
    }
    eprintln!(
        "disk full: upload and create answered 507 no_space; both succeeded once space returned"
    );
    drop(server);
    drop(disk);
}
