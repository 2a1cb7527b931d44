//! The snapshot store on a real S3 server: `s3s-fs` (crates.io, an S3 API over a directory;
//! `scripts/install-deps.sh` installs it into `/var/cache/cove-tools/bin`) on loopback, and a
//! real server process started with `--snapshot-store s3://...` and the `AWS_*` settings an
//! operator would give it. A sandbox with a 20 MiB file (several 8 MiB upload parts) is
//! suspended into the bucket, the server is SIGKILLed and restarted, the sandbox wakes from the
//! bucket byte-exact; a checkpoint in the bucket rolls it back; deleting the sandbox and the
//! checkpoint removes their objects.

use std::path::Path;
use std::time::{Duration, Instant};

use cove_api_types::{
    CreateCheckpointRequest, CreateSandboxRequest, Operation, OperationState, SandboxState,
};
use cove_client::Client;
use cove_e2e::s3::{S3Server, BUCKET};
use cove_e2e::server_process::ServerProcess;
use cove_e2e::{ensure_template, root_sh};

const WAIT: Duration = Duration::from_secs(180);

async fn done(c: &Client, op: &Operation) {
    let op = c.wait_operation(&op.id, WAIT).await.expect("ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?} {:?}",
        op.kind,
        op.error
    );
}

async fn state(c: &Client, id: &str) -> SandboxState {
    c.get_sandbox(id).await.expect("get").state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_wake_and_checkpoints_go_through_a_real_s3_server() {
    let s3 = S3Server::start();
    let mut server = ServerProcess::new(Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")), 500);
    server.env = s3.env(&format!("s3://{BUCKET}/e2e"));
    let c = server.start().await;
    ensure_template(&c, "tiny").await;

    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let resp = c.create_sandbox(&req, None).await.expect("create");
    done(&c, &resp.operation).await;
    let id = resp.sandbox.id;
    let made = root_sh(
        &c,
        &id,
        "mkdir -p /keep && head -c 20971520 /dev/urandom > /keep/big && \
         sha256sum /keep/big | cut -d' ' -f1 > /keep/big.sum && echo kept > /keep/small && \
         cat /keep/big.sum",
    )
    .await;
    assert_eq!(made.command.exit_code, Some(0), "{}", made.stderr_text());
    let sum = made.stdout_text().trim().to_string();
    assert_eq!(sum.len(), 64, "{sum:?}");

    // Suspend: the snapshot is in the bucket, under the store's prefix, not on the local disk.
    done(&c, &c.suspend_sandbox(&id).await.expect("suspend")).await;
    assert_eq!(state(&c, &id).await, SandboxState::Suspended);
    let stored = s3.bytes_named(&id);
    assert!(
        stored >= 20 << 20,
        "the snapshot holds the 20 MiB of random bytes: {stored} bytes in {:?}",
        s3.objects()
    );
    assert!(
        s3.objects().iter().all(|(k, _)| k.starts_with("e2e/")),
        "{:?}",
        s3.objects()
    );
    let local = server.data_dir.join("snapshots");
    assert!(
        !local.exists() || !path_contains(&local, &id),
        "no local copy of the snapshot"
    );

    // The server dies and comes back: the sandbox wakes from the bucket, byte-exact.
    server.kill9();
    let c = server.start().await;
    assert_eq!(state(&c, &id).await, SandboxState::Suspended);
    done(&c, &c.wake_sandbox(&id).await.expect("wake")).await;
    let back = root_sh(
        &c,
        &id,
        "sha256sum /keep/big | cut -d' ' -f1; cat /keep/small",
    )
    .await;
    assert_eq!(back.stdout_text(), format!("{sum}\nkept\n"));

    // A checkpoint in the bucket rolls the sandbox back.
    let ck = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    done(&c, &ck.operation).await;
    let ck_id = ck.checkpoint.id;
    assert!(s3.bytes_named(&ck_id) > 0, "{:?}", s3.objects());
    let changed = root_sh(&c, &id, "rm /keep/small && echo later > /keep/new").await;
    assert_eq!(
        changed.command.exit_code,
        Some(0),
        "{}",
        changed.stderr_text()
    );
    done(
        &c,
        &c.rollback_sandbox(&id, &ck_id).await.expect("rollback"),
    )
    .await;
    let rolled = root_sh(&c, &id, "cat /keep/small; ls /keep").await;
    assert_eq!(rolled.stdout_text(), "kept\nbig\nbig.sum\nsmall\n");

    // Deleting the sandbox and the checkpoint removes their objects from the bucket.
    done(&c, &c.delete_sandbox(&id).await.expect("delete")).await;
    c.delete_checkpoint(&ck_id)
        .await
        .expect("delete checkpoint");
    let until = Instant::now() + Duration::from_secs(60);
    while s3.bytes_named(&id) + s3.bytes_named(&ck_id) > 0 {
        assert!(
            Instant::now() < until,
            "objects left in the bucket: {:?}",
            s3.objects()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether any path under `dir` contains `needle`.
fn path_contains(dir: &Path, needle: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let p = e.path();
            p.display().to_string().contains(needle) || (p.is_dir() && path_contains(&p, needle))
        })
}
