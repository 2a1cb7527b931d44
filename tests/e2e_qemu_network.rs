//! The qemu runtime gets the sandbox network: a server with `--runtime qemu` (TCG here) whose
//! gateway's upstream is the test's fake internet (namespaces the test makes; no other address
//! is ever a destination). One `tiny` VM with an allow list: the allowed name answers through
//! the gateway, another name and a raw address are refused, the counters saw both, and a port
//! of the VM is reached through the path proxy. Skipped (passes with a message) without
//! `qemu-system-x86_64`.

use std::time::Duration;

use cove_api_types::{CreateCommandRequest, CreateSandboxRequest, EgressPolicy};
use cove_e2e::{client_of, delete, have_qemu, sandbox_with, server_with, sh};
use cove_network::lab::WEB_B;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_reaches_an_allowed_host_only() {
    if !have_qemu() {
        return;
    }
    let s = server_with(|cfg| {
        cfg.runtime = cove_server::RuntimeChoice::Qemu;
        cove_e2e::lab::use_fake_internet(cfg);
    });
    let c = client_of(s);
    assert!(c.capabilities().await.expect("caps").network);
    let policy = EgressPolicy::parse(false, &["allowed.test"], &[] as &[&str]).expect("policy");
    let id = sandbox_with(
        &c,
        "tiny",
        CreateSandboxRequest {
            network: Some(policy),
            ..Default::default()
        },
    )
    .await;
    let net = c.sandbox_network(&id).await.expect("network");
    assert!(net.enforced, "{net:?}");
    let address = net.address.clone().expect("an address");
    // The VM holds the sandbox's address, its default route is the gateway.
    let ip = sh(&c, &id, "ip addr; ip route").await.stdout_text();
    assert!(ip.contains(&format!("{address}/32")), "{ip}");
    assert!(ip.contains("default via"), "{ip}");

    // Busybox's own resolver (`nslookup`) asks the gateway; `nc` then sends a request naming
    // the host (the static busybox's `wget` crashes on libc's service lookup in this rootfs).
    let get = |ip: &str, name: &str| {
        format!(
            "printf 'GET / HTTP/1.0\\r\\nHost: {name}\\r\\n\\r\\n' | nc -w 8 {ip} 80 | \
             grep -q '^HTTP/1.[01] 200' && echo ok"
        )
    };
    // A TCG guest on a loaded machine can miss busybox's DNS timeout, so the lookup gets three
    // tries (a refused name fails all three); what it last printed goes to stderr.
    let fetch = |name: &str| {
        format!(
            "for try in 1 2 3; do \
               ip=$(nslookup {name} 2>/dev/null | awk '/^Address/ {{a=$NF}} END {{print a}}'); \
               case $ip in ''|*:*) sleep 1;; *) break;; esac; \
             done; \
             case $ip in ''|*:*) echo \"lookup of {name} gave '$ip'\" >&2; false;; *) {};; esac",
            get("$ip", name)
        )
    };
    let allowed = sh(&c, &id, &fetch("allowed.test")).await;
    assert_eq!(
        allowed.command.exit_code,
        Some(0),
        "{:?} {}",
        allowed.command.signal,
        allowed.stderr_text()
    );
    assert_eq!(allowed.stdout_text(), "ok\n");
    for denied in [fetch("b.test"), get(&WEB_B.to_string(), "b.test")] {
        let out = sh(&c, &id, &denied).await;
        assert_ne!(out.command.exit_code, Some(0), "{denied} must be refused");
        assert!(
            !out.stdout_text().contains("ok"),
            "{denied}: {}",
            out.stdout_text()
        );
    }
    let counters = c.sandbox_network(&id).await.expect("network").counters;
    assert!(counters.connections_allowed >= 1, "{counters:?}");
    assert!(counters.dns_refused >= 1, "{counters:?}");

    // A port of the VM, through the path proxy (busybox httpd serving /tmp/www).
    c.create_command(
        &id,
        &CreateCommandRequest {
            shell: Some(
                "mkdir -p /tmp/www && echo from-the-vm > /tmp/www/index.html && \
                 exec httpd -f -p 8080 -h /tmp/www"
                    .into(),
            ),
            ..Default::default()
        },
    )
    .await
    .expect("httpd");
    let http = reqwest::Client::new();
    let mut body = String::new();
    for _ in 0..100 {
        let r = http
            .get(format!("{}/v1/sandboxes/{id}/ports/8080/", s.api_url))
            .bearer_auth(&s.token)
            .send()
            .await
            .expect("get");
        if r.status() == 200 {
            body = r.text().await.expect("body");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(body, "from-the-vm\n");
    delete(&c, &id).await;
}
