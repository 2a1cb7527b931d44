//! The gvisor runtime end to end: a server started with `--runtime gvisor` (Debian's `runsc`),
//! what only gVisor shows (its own kernel answering the sandbox's system calls, no user
//! namespaces, builds from a file refused), and the sandbox's network namespace with its
//! egress gateway. The shared suites (lifecycle, cases, ...) run on gVisor too with
//! `COVE_TEST_RUNTIME=gvisor`.
//!
//! Fails under `CI=true` without `runsc`; elsewhere skipped (passes with a message).

use cove_api_types::CreateSandboxRequest;
use cove_e2e::{client_of, delete, have_runsc, sandbox, sandbox_with, server_with, sh, Server};

fn gvisor_server() -> &'static Server {
    server_with(|cfg| {
        cfg.runtime = cove_server::RuntimeChoice::Gvisor;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_on_gvisors_kernel_and_says_what_it_cannot_do() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let caps = c.capabilities().await.expect("capabilities");
    assert_eq!(
        (
            caps.runtime.as_str(),
            caps.boundary.as_str(),
            caps.pause,
            caps.suspend_memory,
            caps.user_namespaces,
        ),
        ("gvisor", "application_kernel", true, false, false)
    );

    let id = sandbox(&c, "base").await;
    // The kernel the sandbox sees is gVisor's, not the host's.
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("host release");
    let o = sh(&c, &id, "uname -r; cat /proc/version").await;
    let text = o.stdout_text();
    let guest = text.lines().next().unwrap_or_default();
    assert!(!guest.is_empty(), "{text}");
    assert_ne!(guest, host.trim(), "the sandbox sees the host's kernel");
    // Commands as the default user, files and pipes work as on runc.
    let o = sh(
        &c,
        &id,
        "id -un; echo data > /tmp/f && cat /tmp/f | tr a-z A-Z",
    )
    .await;
    assert_eq!(o.stdout_text(), "user\nDATA\n");

    // A sandbox asking for another runtime than the server's is refused with the reason.
    let err = c
        .create_sandbox(
            &CreateSandboxRequest {
                template: Some("base".into()),
                runtime: Some("runc".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect_err("runc on a gvisor server");
    assert_eq!(err.status(), Some(400));
    assert!(
        err.api_body().is_some_and(|b| b.message.contains("gvisor")),
        "{err:?}"
    );
    // Asking for gvisor by name is fine.
    let named = sandbox_with(
        &c,
        "base",
        CreateSandboxRequest {
            runtime: Some("gvisor".into()),
            ..Default::default()
        },
    )
    .await;
    delete(&c, &named).await;
    delete(&c, &id).await;
}
