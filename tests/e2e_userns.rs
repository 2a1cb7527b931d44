//! Issue 12 item 3: user namespaces for runc sandboxes. Each sandbox's root is an unprivileged
//! host id range of its own (65536 ids from `--userns-base`, default 2^30): the mapping is
//! visible inside, files the sandbox writes belong to the range on the host, two live
//! sandboxes never share a range, the sandbox's root cannot read a host root-only file put
//! where it can see it, and a sandbox suspended and woken into another range keeps its files'
//! owners.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use cove_api_types::OperationState;
use cove_e2e::{client, delete, root_sh, sandbox, server, sh};

/// The default first host id of the ranges.
const BASE: u32 = 1 << 30;
/// Ids per sandbox.
const RANGE: u32 = 65_536;

/// The host id of the sandbox's root, read from `/proc/self/{uid,gid}_map` inside (which must
/// map exactly `0 → host, 65536` for both).
async fn host_root(c: &cove_client::Client, id: &str) -> u32 {
    let out = root_sh(c, id, "cat /proc/self/uid_map; cat /proc/self/gid_map").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    let text = out.stdout_text();
    let maps: Vec<Vec<u32>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .collect();
    assert_eq!(maps.len(), 2, "one line each: {text:?}");
    for m in &maps {
        assert_eq!(m.len(), 3, "{text:?}");
        assert_eq!(m[0], 0, "container root mapped: {text:?}");
        assert_eq!(m[2], RANGE, "65536 ids: {text:?}");
        assert!(m[1] >= BASE && (m[1] - BASE) % RANGE == 0, "{text:?}");
    }
    assert_eq!(maps[0][1], maps[1][1], "uids and gids alike: {text:?}");
    maps[0][1]
}

/// The host path of a file in the sandbox's own layer.
fn upper_path(id: &str, path: &str) -> std::path::PathBuf {
    server()
        .data_dir
        .join("sandboxes")
        .join(id)
        .join("upper")
        .join(path.trim_start_matches('/'))
}

async fn finished(c: &cove_client::Client, op: cove_api_types::Operation) {
    let op = c
        .wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("operation finishes");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_get_disjoint_unprivileged_ranges() {
    let c = client();
    assert!(
        c.capabilities()
            .await
            .expect("capabilities")
            .user_namespaces,
        "runc reports user namespaces"
    );
    let a = sandbox(&c, "base").await;
    let b = sandbox(&c, "base").await;
    let (ra, rb) = (host_root(&c, &a).await, host_root(&c, &b).await);
    assert_ne!(ra, rb, "two live sandboxes share a range");

    // Root's and user's files belong to the range on the host, and to them inside.
    let out = root_sh(
        &c,
        &a,
        "touch /root/by-root && su user -c 'touch /home/user/by-user' && \
         stat -c '%u %g' /root/by-root /home/user/by-user /etc/passwd",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "0 0\n1000 1000\n0 0\n");
    let meta = std::fs::metadata(upper_path(&a, "/root/by-root")).expect("in the upper dir");
    assert_eq!((meta.uid(), meta.gid()), (ra, ra));
    let meta = std::fs::metadata(upper_path(&a, "/home/user/by-user")).expect("in the upper dir");
    assert_eq!((meta.uid(), meta.gid()), (ra + 1000, ra + 1000));

    // `sudo` (setuid root from the release) still makes root.
    let out = sh(&c, &a, "sudo -n id -u").await;
    assert_eq!(
        (out.command.exit_code, out.stdout_text()),
        (Some(0), "0\n".to_string()),
        "{}",
        out.stderr_text()
    );

    // The network namespace's sysctls still hold for every user: ICMP datagram sockets (ping
    // without raw sockets) and ports below 1024. Nothing is sent.
    let out = sh(
        &c,
        &a,
        "python3 -c 'import socket\n\
         socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n\
         s = socket.socket(); s.bind((\"127.0.0.1\", 80)); print(\"ok\")'",
    )
    .await;
    assert_eq!(
        (out.command.exit_code, out.stdout_text()),
        (Some(0), "ok\n".to_string()),
        "{}",
        out.stderr_text()
    );

    delete(&c, &a).await;
    delete(&c, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_inside_cannot_read_a_host_root_file() {
    let c = client();
    let a = sandbox(&c, "base").await;
    // A host root-only file where the sandbox sees it: in the agent's run dir, bound in from
    // the host (its `scripts/` subdirectory is not sealed).
    let out = root_sh(&c, &a, "ls -d /.cove/run/scripts").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    let run = server()
        .data_dir
        .join("sandboxes")
        .join(&a)
        .join("disk/run");
    let run = if run.is_dir() {
        run
    } else {
        server().data_dir.join("sandboxes").join(&a).join("run")
    };
    let secret = run.join("scripts/host-secret");
    std::fs::write(&secret, b"host only\n").expect("write the host file");
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).expect("chown");
    std::fs::set_permissions(
        &secret,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )
    .expect("chmod");

    let out = root_sh(
        &c,
        &a,
        "stat -c '%u' /.cove/run/scripts/host-secret; \
         cat /.cove/run/scripts/host-secret && echo READ; \
         chmod 644 /.cove/run/scripts/host-secret && echo CHMOD; \
         rm -f /.cove/run/scripts/host-secret; echo done",
    )
    .await;
    let text = out.stdout_text();
    // Host root is no id of the sandbox's: it shows as the overflow id, and root inside has no
    // power over it.
    assert!(text.starts_with("65534\n"), "{text:?}");
    assert!(!text.contains("READ"), "root inside read a host root file");
    assert!(
        !text.contains("CHMOD"),
        "root inside changed a host root file"
    );
    assert!(
        !text.contains("host only"),
        "root inside read a host root file"
    );
    // `rm` in a directory the sandbox's root owns works (it is the sandbox's directory); the
    // file's content was never readable.
    let _ = std::fs::remove_file(&secret);
    delete(&c, &a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_into_another_range_keeps_owners() {
    let c = client();
    let a = sandbox(&c, "base").await;
    let before = host_root(&c, &a).await;
    let out = sh(
        &c,
        &a,
        "echo mine > /home/user/kept && stat -c '%u %g' /home/user/kept",
    )
    .await;
    assert_eq!(out.stdout_text(), "1000 1000\n", "{}", out.stderr_text());

    finished(&c, c.suspend_sandbox(&a).await.expect("suspend")).await;
    // Another sandbox takes a free range meanwhile (likely the one `a` gave back).
    let other = sandbox(&c, "base").await;
    let taken = host_root(&c, &other).await;
    finished(&c, c.wake_sandbox(&a).await.expect("wake")).await;
    let after = host_root(&c, &a).await;
    assert_ne!(after, taken, "two live sandboxes share a range");
    if taken == before {
        assert_ne!(after, before);
    }

    let out = sh(
        &c,
        &a,
        "stat -c '%u %g' /home/user/kept && cat /home/user/kept && echo more >> /home/user/kept",
    )
    .await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "1000 1000\nmine\n");
    let meta = std::fs::metadata(upper_path(&a, "/home/user/kept")).expect("in the upper dir");
    assert_eq!(meta.uid(), after + 1000);

    delete(&c, &a).await;
    delete(&c, &other).await;
}
