//! Issue 26: cancelling a build reaches the work. An import hashing a large image archive
//! (a sparse file in the server's OCI import directory) stops burning a core once its
//! operation is cancelled, instead of running on after the operation answered `cancelled`.
//! The server runs in this test's process (one test per binary), so the process's CPU time
//! tells whether the hashing thread still runs.

use std::time::Duration;

use cove_api_types::{CreateTemplateQuery, OperationState};
use cove_e2e::{client, oci_import_dir};

/// This process's user + system CPU time.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    // Fields after the command name (which may hold spaces) start after the last `)`.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here.
    let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    // `/proc` counts in USER_HZ, 100 on Linux whatever the kernel's own tick.
    Duration::from_millis(ticks * 10)
}

/// CPU time this process uses over `d`.
async fn cpu_over(d: Duration) -> Duration {
    let before = cpu();
    tokio::time::sleep(d).await;
    cpu().saturating_sub(before)
}

fn context(file: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", file.as_bytes())
        .expect("append");
    b.into_inner().expect("tar")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_import_stops_hashing() {
    let c = client();
    // 6 GiB of holes: under the default bound, minutes of hashing.
    let big = std::fs::File::create(oci_import_dir().join("big.tar")).expect("create");
    big.set_len(6 << 30).expect("sparse");
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "cancelled-import".into(),
                ..Default::default()
            },
            context("FROM oci-archive:big.tar\n"),
        )
        .await
        .expect("accepted");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let busy = cpu_over(Duration::from_secs(2)).await;
    eprintln!("CPU in 2 s before the cancel: {busy:?}");
    assert!(
        busy > Duration::from_millis(300),
        "the import is hashing before the cancel ({busy:?} of CPU in 2 s)"
    );
    c.cancel_operation(&resp.operation.id)
        .await
        .expect("cancel");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(30))
        .await
        .expect("ends");
    assert_eq!(op.state, OperationState::Cancelled, "{:?}", op.error);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = cpu_over(Duration::from_secs(3)).await;
    eprintln!("CPU in 3 s after the cancel: {after:?}");
    assert!(
        after < Duration::from_millis(250),
        "the hashing stopped with the cancel ({after:?} of CPU in 3 s after it)"
    );
    let _ = c.delete_template("cancelled-import").await;
    let _ = std::fs::remove_file(oci_import_dir().join("big.tar"));
}
