//! Issue 12, item 5: every sandbox gets a disk of its own by default (`--default-disk-mib`,
//! 10 GiB, shown in `GET /v1/capabilities`), `df` inside shows that size, and the guest agent's
//! run dir (`/.cove/run`, writable by the sandbox's root) lives on that disk, so it is bounded
//! by it instead of by the node's free space.

use cove_e2e::{client, delete, root_sh, sandbox};

/// `df -k` of `path` inside the sandbox: (size, available) in KiB.
async fn df(c: &cove_client::Client, id: &str, path: &str) -> (u64, u64) {
    let out = root_sh(
        c,
        id,
        &format!("df -k --output=size,avail {path} | tail -1"),
    )
    .await
    .stdout_text();
    let mut it = out
        .split_whitespace()
        .map(|v| v.parse().expect("df number"));
    (it.next().expect("size"), it.next().expect("avail"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_get_a_default_disk_that_also_bounds_the_agents_run_dir() {
    let c = client();
    let caps = c.capabilities().await.expect("capabilities");
    assert_eq!(caps.default_disk_mib, Some(cove_server::DEFAULT_DISK_MIB));

    let id = sandbox(&c, "base").await;
    let got = c.get_sandbox(&id).await.expect("get");
    assert_eq!(got.resources.disk_mib, Some(cove_server::DEFAULT_DISK_MIB));

    // `df` shows the size asked for (ext4 keeps ~2 % for its own metadata).
    let asked_kib = cove_server::DEFAULT_DISK_MIB * 1024;
    let (size, _) = df(&c, &id, "/").await;
    assert!(
        size <= asked_kib && size >= asked_kib * 97 / 100,
        "df shows {size} KiB for a {asked_kib} KiB disk"
    );

    // The image is sparse: a fresh 10 GiB disk costs the node a few MiB.
    let dir = cove_e2e::server().data_dir.join("sandboxes").join(&id);
    let image = dir.join("disk.img");
    let allocated = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&image).expect("image").blocks() * 512
    };
    assert!(
        allocated < 64 << 20,
        "a fresh default disk allocates {allocated} bytes on the node"
    );

    // /.cove/run is on the same filesystem: what root writes there uses the sandbox's disk.
    let (run_size, _) = df(&c, &id, "/.cove/run").await;
    assert_eq!(run_size, size, "/.cove/run is on the sandbox's disk");
    let (_, before) = df(&c, &id, "/").await;
    let o = root_sh(
        &c,
        &id,
        "dd if=/dev/zero of=/.cove/run/output/filler bs=1M count=64 2>/dev/null && sync && echo ok",
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n", "{}", o.stderr_text());
    let (_, after) = df(&c, &id, "/").await;
    assert!(
        before.saturating_sub(after) >= 60 * 1024,
        "64 MiB written to /.cove/run came off the sandbox's disk: {before} → {after} KiB"
    );
    delete(&c, &id).await;
}
