//! Issue 27 finding 7: `socket(AF_VSOCK)` and `socket(AF_ALG)` fail inside a runc sandbox with
//! `EAFNOSUPPORT` (seccomp, by argument, as Docker's profile does), while the families a
//! sandbox needs still open. vsock is node-wide rather than per network namespace, so a sandbox
//! that could open one could listen on the node's vsock ports or reach a hypervisor's side.
//!
//! Nothing is sent anywhere: the probe only creates sockets and closes them.

use cove_e2e::{client, delete, root_sh, sandbox};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vsock_and_alg_sockets_are_refused_by_family() {
    let c = client();
    let id = sandbox(&c, "base").await;
    // The raw syscall through ctypes reports the errno seccomp returns, with no Python
    // fallback in between. Families: AF_UNIX 1, AF_INET 2, AF_INET6 10, AF_ALG 38,
    // AF_VSOCK 40; types SOCK_STREAM 1, SOCK_SEQPACKET 5.
    let script = r#"python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, family, kind in (("unix", 1, 1), ("inet", 2, 1), ("inet6", 10, 1), ("alg", 38, 5), ("vsock", 40, 1)):
    fd = libc.socket(family, kind, 0)
    if fd >= 0:
        os.close(fd)
        print(name, "open")
    else:
        print(name, ctypes.get_errno())
EOF"#;
    let out = root_sh(&c, &id, script).await;
    let text = out.stdout_text();
    delete(&c, &id).await;
    assert_eq!(
        text,
        "unix open\ninet open\ninet6 open\nalg 97\nvsock 97\n",
        "stderr: {}",
        out.stderr_text()
    );
}
