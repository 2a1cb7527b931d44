//! Issue 27 finding 8: what a sandbox sends cannot flood the node's log. A sandbox opens 1,000
//! connections through the egress gateway, each carrying a bad TLS hello (half with an illegal
//! SNI name holding a marker, half not a client hello at all); the server's log gains a bounded
//! number of warning lines, and never the sandbox's bytes beyond a short escaped prefix.
//!
//! The server runs as its own process (its stderr is the log under test) with the fake internet
//! of `cove_network::lab` as the gateway's upstream: the connections go to a web server address
//! inside the test's own namespaces, and a deny-by-default policy refuses them at the gateway
//! before any upstream connect.

use std::path::Path;
use std::time::Duration;

use cove_api_types::{BuildReleaseRequest, CreateSandboxRequest, EgressPolicy, OperationState};
use cove_e2e::server_process::ServerProcess;
use cove_network::lab::WEB_A;

/// Most warning lines the burst may add (one per sandbox per limiter interval, plus slack for
/// unrelated warnings of the server).
const MAX_NEW_WARNINGS: usize = 5;
const HELLOS: usize = 1_000;
const MARKER: &str = "cove-marker-sni";

/// Removes the fake internet's namespaces even when the test fails.
struct LabGuard(String);
impl Drop for LabGuard {
    fn drop(&mut self) {
        let _ = cove_network::lab::destroy_namespaces(&self.0);
    }
}

fn warnings(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("WARN")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_bad_tls_hellos_make_a_bounded_log() {
    let lab_prefix = format!("g{:x}", std::process::id() % 0xff_ffff);
    let _guard = LabGuard(lab_prefix.clone());
    let lab = cove_network::lab::FakeInternet::create(&lab_prefix)
        .await
        .expect("fake internet");
    let mut server = ServerProcess::new(Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")), 30_000);
    server.env = vec![("COVE_E2E_UPSTREAM_NS".into(), lab.upstream_ns.clone())];
    let c = server.start().await;
    let build = c
        .build_release("base", &BuildReleaseRequest::default())
        .await
        .expect("build");
    let op = c
        .wait_operation(&build.operation.id, Duration::from_secs(1800))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let req = CreateSandboxRequest {
        network: Some(EgressPolicy::parse(false, &["allowed.test"], &[]).expect("policy")),
        ..Default::default()
    };
    let resp = c.create_sandbox(&req, None).await.expect("create");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let id = resp.sandbox.id;

    let log_path = server.data_dir.join("server.log");
    let before = std::fs::read_to_string(&log_path).unwrap_or_default();
    // Every connection is bounded by a 3 s timeout; the gateway refuses each (no name the
    // policy allows) without connecting upstream.
    let script = format!(
        r#"python3 - <<'EOF'
import socket, struct
def hello(sni):
    names = b"\x00" + struct.pack(">H", len(sni)) + sni
    ext = struct.pack(">HHH", 0, len(names) + 2, len(names)) + names
    body = b"\x03\x03" + bytes(32) + b"\x00" + struct.pack(">H", 2) + b"\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(ext)) + ext
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs
illegal = hello(b"{MARKER}-" + b"x" * 200 + b"!!")
garbage = b"\x16\x03\x01\x00\x08\x01\x00\x00\x04\xff\xff\xff\xff"
sent = 0
for i in range({HELLOS}):
    s = socket.create_connection(("{WEB_A}", 443), timeout=3)
    try:
        s.sendall(illegal if i % 2 else garbage)
        s.recv(64)
    except OSError:
        pass
    s.close()
    sent += 1
print(sent)
EOF"#
    );
    let out = cove_e2e::sh(&c, &id, &script).await;
    assert_eq!(
        out.stdout_text().trim(),
        HELLOS.to_string(),
        "stderr: {}",
        out.stderr_text()
    );
    let after = std::fs::read_to_string(&log_path).unwrap_or_default();
    let new = &after[before.len().min(after.len())..];
    let new_warnings = warnings(new);
    assert!(
        new_warnings.len() <= MAX_NEW_WARNINGS,
        "{} new warning lines ({} bytes of log) for {HELLOS} bad hellos; first: {:?}",
        new_warnings.len(),
        new.len(),
        new_warnings.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        !after.contains(MARKER),
        "the sandbox's bytes reached the log: {:?}",
        after.lines().find(|l| l.contains(MARKER))
    );
    assert!(
        new_warnings
            .iter()
            .any(|l| l.contains("malformed TLS hello from a sandbox") && l.contains(&id)),
        "the gateway's own (rate-limited) warning is missing: {new_warnings:?}"
    );
    c.delete_sandbox(&id).await.expect("delete");
}
