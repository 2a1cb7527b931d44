//! Issue 32 items 9, 4 and 5: what a server leaves on the host's network and how its sandboxes
//! reach a corporate network. Each test runs `cove-e2e-server` as its own process with a fake
//! internet of its own (`cove_network::lab`: namespaces the test makes, with addresses chosen
//! at run time that no host route uses) as the gateway's upstream; no traffic goes anywhere else.
//!
//! - A stop (SIGTERM, as `cove server` gets it) removes the gateway namespace and the ready
//!   pool (every veth and the nft state go with them); a running sandbox keeps its own
//!   namespace and the next start adopts it (its network works again). With
//!   `--keep-network-on-stop` the gateway stays until the next start.
//! - `--sandbox-ca-file`: a sandbox and a template build trust a CA the test made (curl and
//!   Python to the fake internet's HTTPS server signed by it, no `--cacert`).
//! - `--upstream-proxy`: every allowed connection goes through the fake internet's CONNECT
//!   proxy (with the URL's credentials), toward the judged address.
//! - Denials speak: plain HTTP gets a 403 with a one-line reason, TLS the `access_denied`
//!   alert, and the sandbox a `network.denied` event with host, port and rule.

use std::path::Path;
use std::time::Duration;

use cove_api_types::{
    BuildReleaseRequest, CreateSandboxRequest, EgressPolicy, EventType, OperationState,
};
use cove_client::Client;
use cove_e2e::lab::OwnLab;
use cove_e2e::server_process::ServerProcess;
use cove_e2e::{build_file, create_running, delete, network_namespaces, sh};
use cove_network::lab::{PROXY_ADDR, PROXY_PORT, WEB_A, WEB_B};
use futures::StreamExt;

fn server(lab: &OwnLab) -> ServerProcess {
    let mut s = ServerProcess::new(Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")), 30_000);
    s.env = lab.server_env();
    s
}

/// Builds `base` (from the shared cache: seconds).
async fn base(c: &Client) {
    let build = c
        .build_release("base", &BuildReleaseRequest::default())
        .await
        .expect("build");
    let op = c
        .wait_operation(&build.operation.id, Duration::from_secs(1800))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
}

fn env(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_releases_the_gateway_and_ready_pool_and_a_restart_adopts_running_sandboxes() {
    let lab = OwnLab::create('s').await;
    let mut server = server(&lab);
    let c = server.start().await;
    base(&c).await;
    let id = create_running(&c, &CreateSandboxRequest::default()).await;
    let fetch = "curl -fsS -m 8 http://allowed.test/";
    assert_eq!(
        sh(&c, &id, fetch).await.stdout_text(),
        "site=web-a host=allowed.test"
    );
    let before = network_namespaces(&server.data_dir);
    assert!(
        before.len() > 2,
        "gateway, ready pool and the sandbox: {before:?}"
    );
    let record = server.data_dir.join("network").join(format!("{id}.json"));
    let netns =
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&record).expect("record"))
            .expect("record json")["netns"]
            .as_str()
            .expect("netns")
            .to_string();

    // SIGTERM: only the running sandbox's own namespace stays.
    let left = server.stop();
    assert!(left.is_empty(), "left after the stop: {left:?}");
    assert_eq!(
        network_namespaces(&server.data_dir),
        [netns.clone()].into(),
        "only the running sandbox's namespace stays"
    );

    // The next start adopts it: same sandbox, its network works again.
    let c = server.start().await;
    let out = sh(&c, &id, fetch).await;
    assert_eq!(
        out.stdout_text(),
        "site=web-a host=allowed.test",
        "{}",
        out.stderr_text()
    );

    // With --keep-network-on-stop the gateway stays for the next start, which replaces it.
    server
        .env
        .push(("COVE_E2E_KEEP_NETWORK_ON_STOP".into(), "1".into()));
    let _ = server.stop();
    let c = server.start().await;
    let left = server.stop();
    assert!(
        left.iter().any(|ns| ns.ends_with("-gw")),
        "the gateway is kept: {left:?}"
    );
    server.env.pop();
    let c2 = server.start().await;
    drop(c);
    let out = sh(&c2, &id, fetch).await;
    assert_eq!(
        out.stdout_text(),
        "site=web-a host=allowed.test",
        "{}",
        out.stderr_text()
    );

    // With no sandbox left, a stop leaves nothing at all.
    delete(&c2, &id).await;
    let left = server.stop();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        network_namespaces(&server.data_dir).is_empty(),
        "{:?}",
        network_namespaces(&server.data_dir)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_ca_and_an_upstream_proxy_serve_sandboxes_and_builds() {
    let lab = OwnLab::create('c').await;
    let mut server = server(&lab);
    server.env.extend(env(&[
        (
            "COVE_E2E_SANDBOX_CA_FILE",
            lab.ca_file().display().to_string(),
        ),
        (
            "COVE_E2E_UPSTREAM_PROXY",
            format!("http://cove:pr0xy@{PROXY_ADDR}:{PROXY_PORT}"),
        ),
    ]));
    let c = server.start().await;
    base(&c).await;
    let id = create_running(&c, &CreateSandboxRequest::default()).await;

    // curl and Python trust the CA without being told; pip and Node are pointed at the bundle.
    let out = sh(&c, &id, "curl -fsS -m 8 https://allowed.test/").await;
    assert_eq!(
        out.stdout_text(),
        "site=tls-allowed.test host=allowed.test",
        "{}",
        out.stderr_text()
    );
    let py = "python3 -c \"import urllib.request as u; \
              print(u.urlopen('https://other.test/', timeout=8).read().decode())\"";
    let out = sh(&c, &id, py).await;
    assert_eq!(
        out.stdout_text().trim(),
        "site=tls-other.test host=other.test",
        "{}",
        out.stderr_text()
    );
    let out = sh(
        &c,
        &id,
        "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $PIP_CERT $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS",
    )
    .await;
    assert_eq!(
        out.stdout_text().trim(),
        ["/etc/ssl/certs/ca-certificates.crt"; 5].join(" ")
    );

    // Every connection went through the proxy, with its credentials, toward the address.
    let proxied = lab.lab().seen.proxied();
    let auth = "Basic Y292ZTpwcjB4eQ==".to_string();
    assert!(
        proxied.contains(&(format!("{WEB_A}:443"), auth.clone())),
        "{proxied:?}"
    );
    assert!(proxied.iter().all(|(_, a)| *a == auth), "{proxied:?}");

    // A build's RUN trusts the CA and goes through the proxy too.
    let file = "FROM base\nRUN curl -fsS -m 8 https://allowed.test/ > /got.txt && cat /got.txt\n";
    let (state, _, log) = build_file(&c, "ca-build", file, EgressPolicy::default()).await;
    assert_eq!(state, OperationState::Succeeded, "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l == "stdout: site=tls-allowed.test host=allowed.test"),
        "{log:#?}"
    );
    let n = lab.lab().seen.proxied().len();
    assert!(n > proxied.len(), "the build went through the proxy");

    // Plain HTTP through the proxy as well (a denied host is never asked of it).
    let denied = EgressPolicy::parse(true, &[] as &[String], &[WEB_B.to_string()]).expect("policy");
    c.set_sandbox_network(&id, &denied)
        .await
        .expect("set policy");
    let out = sh(
        &c,
        &id,
        "curl -sS -m 8 http://b.test/; echo; curl -fsS -m 8 http://allowed.test/",
    )
    .await;
    assert!(
        out.stdout_text().ends_with("site=web-a host=allowed.test"),
        "{out:?}"
    );
    let proxied = lab.lab().seen.proxied();
    assert!(
        proxied
            .iter()
            .all(|(t, _)| !t.starts_with(&WEB_B.to_string())),
        "{proxied:?}"
    );
    delete(&c, &id).await;
    assert!(server.stop().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_speak_to_the_command_that_hit_them() {
    let lab = OwnLab::create('d').await;
    let mut server = server(&lab);
    let c = server.start().await;
    base(&c).await;
    let req = CreateSandboxRequest {
        network: Some(
            EgressPolicy::parse(true, &[] as &[String], &[WEB_B.to_string()]).expect("policy"),
        ),
        ..Default::default()
    };
    let id = create_running(&c, &req).await;
    let mut events = Box::pin(c.events(None));

    // Plain HTTP: a 403 whose body is one line naming the destination and the rule.
    let out = sh(&c, &id, "curl -sS -m 8 -w ' %{http_code}' http://b.test/").await;
    let reason =
        format!("cove: the sandbox's egress policy denied b.test ({WEB_B}:80): deny {WEB_B}");
    assert_eq!(out.stdout_text(), format!("{reason}\n 403"), "{out:?}");

    // TLS: curl and Python say "access denied" (not a reset or an unexpected EOF), at once.
    let t0 = std::time::Instant::now();
    let out = sh(&c, &id, "curl -sS -m 8 https://b.test/").await;
    assert!(out.stderr_text().contains("alert access denied"), "{out:?}");
    let py = "python3 -c \"import urllib.request as u; u.urlopen('https://b.test/', timeout=8)\"";
    let out = sh(&c, &id, py).await;
    assert!(out.stderr_text().contains("ACCESS_DENIED"), "{out:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "no retries, no timeout"
    );

    // The sandbox's network.denied event names the host, the port and the rule.
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            let ev = ev.expect("event");
            if ev.kind == EventType::NetworkDenied && ev.sandbox_id == id && ev.port == Some(80) {
                return ev;
            }
        }
        panic!("event stream ended")
    })
    .await
    .expect("a network.denied event");
    assert_eq!(
        (
            found.host.as_deref(),
            found.rule.clone(),
            found.reason.as_deref()
        ),
        (
            Some("b.test"),
            Some(format!("deny {WEB_B}")),
            Some("denied")
        )
    );
    delete(&c, &id).await;
    assert!(server.stop().is_empty());
}
