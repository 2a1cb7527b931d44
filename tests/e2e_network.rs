//! Issue 9, sandbox networks end to end: a real server whose gateway's upstream is a fake
//! internet made of namespaces (`cove_network::lab::FakeInternet`: HTTP and HTTPS servers, DNS,
//! a metadata server, a "host" service), real runc sandboxes of the `base` template running
//! `curl` and `getent`, real nftables. Needs root.
//!
//! Covered: internet on and off; an allow list of one domain (the name works, the same IP under
//! another SNI and the raw IP are refused, DNS answers only that name); a denied CIDR inside an
//! allowed range; the floor (metadata, the host's service, the control plane, another sandbox)
//! whatever the policy; a live `PUT` that the next connection follows, with counters; a
//! `network.denied` event; a secret (the HTTPS API sees the value, its echo comes back with the
//! placeholder; the sandbox and every other
//! host see the placeholder, the store and the API never hold the value in clear), also on a
//! create served by a warm pool.

use std::time::Duration;

use cove_api_types::{
    CreateSandboxRequest, EgressPolicy, ErrorCode, EventType, SandboxState, SecretRequest,
};
use cove_client::{Client, ClientError, UploadOptions};
use cove_e2e::{delete, sandbox_with, server_with, sh};
use cove_network::lab::{
    inet_range, lab_pool, LabAddr, DNS_ADDR, HOST_SERVICE_PORT, METADATA, UP_ADDR, WEB_A, WEB_B,
};
use futures::StreamExt;

fn fake_internet() -> &'static cove_e2e::lab::Lab {
    cove_e2e::lab::fake_internet()
}

/// The server of this binary: networking on, upstream the fake internet, listening on every
/// address (so "the control plane" is every host address, which must stay unreachable).
fn tweak(cfg: &mut cove_server::Config) {
    cove_e2e::lab::use_fake_internet(cfg);
    cfg.listen = "0.0.0.0:0".parse().expect("addr");
}

fn c() -> Client {
    cove_e2e::client_of(server_with(tweak))
}

fn policy(internet: bool, allow: &[&str], deny: &[&str]) -> EgressPolicy {
    EgressPolicy::parse(internet, allow, deny).expect("policy")
}

/// A create of a `base` sandbox with `network` and `secrets` (name, value, hosts).
fn net_req(
    network: Option<EgressPolicy>,
    secrets: &[(&str, &str, &[&str])],
) -> CreateSandboxRequest {
    CreateSandboxRequest {
        network,
        secrets: secrets
            .iter()
            .map(|(name, value, hosts)| {
                (
                    name.to_string(),
                    SecretRequest {
                        value: value.to_string(),
                        hosts: hosts.iter().map(|h| h.parse().expect("host")).collect(),
                    },
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// A running `base` sandbox with `network` (and `secrets`).
async fn sandbox_net(
    c: &Client,
    network: Option<EgressPolicy>,
    secrets: &[(&str, &str, &[&str])],
) -> String {
    let id = sandbox_with(c, "base", net_req(network, secrets)).await;
    // The lab's CA, for HTTPS that the gateway does not intercept.
    c.upload(
        &id,
        "/tmp/lab-ca.pem",
        fake_internet().ca_pem.clone(),
        &UploadOptions::default(),
    )
    .await
    .expect("upload the lab CA");
    id
}

/// `curl` in the sandbox: `Ok(body)` or `Err(curl's exit code and stderr)`. A refusal is a
/// closed connection, or for plain HTTP the gateway's `403` answer (`network_denied`).
async fn curl(c: &Client, id: &str, args: &str) -> Result<String, String> {
    let out = sh(c, id, &format!("curl -fsS -m 8 {args}")).await;
    match out.command.exit_code {
        Some(0) => Ok(out.stdout_text()),
        code => Err(format!("exit {code:?}: {}", out.stderr_text().trim())),
    }
}

/// Whether `name` resolves in the sandbox.
async fn resolves(c: &Client, id: &str, name: &str) -> Option<String> {
    let out = sh(c, id, &format!("getent ahostsv4 {name} | head -n1")).await;
    let text = out.stdout_text();
    (out.command.exit_code == Some(0) && !text.trim().is_empty()).then(|| {
        text.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    })
}

fn web(ip: LabAddr) -> String {
    format!("http://{ip}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internet_on_reaches_the_internet_and_off_reaches_nothing() {
    let c = c();
    let on = sandbox_net(&c, None, &[]).await;
    let got = c.get_sandbox(&on).await.expect("get");
    assert!(got.network.is_default(), "{:?}", got.network);
    assert_eq!(
        curl(&c, &on, "http://b.test/").await.as_deref(),
        Ok("site=web-b host=b.test")
    );
    assert_eq!(
        resolves(&c, &on, "allowed.test").await.as_deref(),
        Some(WEB_A.to_string().as_str())
    );
    assert!(curl(&c, &on, &web(WEB_A)).await.is_ok());

    let off = sandbox_net(&c, Some(EgressPolicy::offline()), &[]).await;
    let got = c.get_sandbox(&off).await.expect("get");
    assert!(!got.network.internet);
    assert_eq!(
        resolves(&c, &off, "b.test").await,
        None,
        "DNS answers nothing"
    );
    assert_eq!(resolves(&c, &off, "allowed.test").await, None);
    assert!(curl(&c, &off, "http://b.test/").await.is_err());
    assert!(curl(&c, &off, &web(WEB_B)).await.is_err(), "raw IP refused");
    assert!(curl(
        &c,
        &off,
        &format!("--cacert /tmp/lab-ca.pem https://{WEB_A}/")
    )
    .await
    .is_err());
    // UDP elsewhere than the gateway's DNS is dropped: a direct question to the lab's DNS
    // gets no answer.
    let direct = sh(
        &c,
        &off,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
             s.settimeout(2); s.sendto(b'x'*12, ('{DNS_ADDR}', 53)); \
             print(s.recvfrom(512))\" 2>&1 | tail -n1"
        ),
    )
    .await;
    assert!(
        direct.stdout_text().contains("timed out"),
        "{}",
        direct.stdout_text()
    );
    let net = c.sandbox_network(&off).await.expect("network");
    assert_eq!(
        net.counters.dns_answered, 0,
        "no question went upstream: {:?}",
        net.counters
    );
    assert!(net.enforced);
    assert!(net.counters.connections_denied >= 2, "{:?}", net.counters);
    assert!(net.counters.dns_refused >= 2, "{:?}", net.counters);
    assert_eq!(net.counters.connections_allowed, 0, "{:?}", net.counters);
    delete(&c, &on).await;
    delete(&c, &off).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_domain_opens_that_name_only() {
    let c = c();
    let id = sandbox_net(&c, Some(policy(false, &["allowed.test"], &[])), &[]).await;
    assert_eq!(
        resolves(&c, &id, "allowed.test").await.as_deref(),
        Some(WEB_A.to_string().as_str())
    );
    assert_eq!(
        resolves(&c, &id, "other.test").await,
        None,
        "other names do not resolve"
    );
    assert_eq!(
        curl(&c, &id, "--cacert /tmp/lab-ca.pem https://allowed.test/")
            .await
            .as_deref(),
        Ok("site=tls-allowed.test host=allowed.test")
    );
    assert_eq!(
        curl(&c, &id, "http://allowed.test/").await.as_deref(),
        Ok("site=web-a host=allowed.test")
    );
    // Same IP, another SNI (the certificate is valid for it): refused.
    let other = curl(
        &c,
        &id,
        &format!("--cacert /tmp/lab-ca.pem --resolve other.test:443:{WEB_A} https://other.test/"),
    )
    .await;
    assert!(other.is_err(), "{other:?}");
    // Same IP under another Host, and the raw IP: refused.
    let other_host = curl(&c, &id, &format!("-H 'Host: other.test' {}", web(WEB_A))).await;
    assert!(other_host.is_err(), "{other_host:?}");
    assert!(curl(&c, &id, &web(WEB_A)).await.is_err(), "raw IP");
    assert!(
        curl(
            &c,
            &id,
            &format!("--cacert /tmp/lab-ca.pem https://{WEB_A}/")
        )
        .await
        .is_err(),
        "raw IP over TLS"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_cidr_inside_an_allowed_range_stays_closed() {
    let c = c();
    let id = sandbox_net(
        &c,
        Some(policy(
            false,
            &[&inet_range().to_string()],
            &[&format!("{WEB_B}/32")],
        )),
        &[],
    )
    .await;
    assert_eq!(
        curl(&c, &id, &web(WEB_A)).await.as_deref(),
        Ok(format!("site=web-a host={WEB_A}").as_str())
    );
    assert!(
        curl(&c, &id, &web(WEB_B)).await.is_err(),
        "denied inside the allowed range"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_stays_closed_whatever_the_policy() {
    let c = c();
    let server = server_with(tweak);
    let api_port: u16 = server
        .api_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("api port");
    let host_ip = cove_network::cmd::addresses(None)
        .expect("host addresses")
        .into_iter()
        .find(|ip| !ip.is_loopback())
        .expect("a host address");
    let other = sandbox_net(&c, None, &[]).await;
    let other_addr = c
        .sandbox_network(&other)
        .await
        .expect("network")
        .address
        .expect("address");
    // The other sandbox serves on 8000.
    c.create_command(
        &other,
        &cove_api_types::CreateCommandRequest {
            shell: Some("exec python3 -m http.server 8000 --bind 0.0.0.0".into()),
            ..Default::default()
        },
    )
    .await
    .expect("serve");
    let targets = [
        format!("http://{METADATA}/latest/meta-data/"),
        format!("http://{UP_ADDR}:{HOST_SERVICE_PORT}/"),
        format!("http://127.0.0.1:{HOST_SERVICE_PORT}/"),
        format!("http://{host_ip}:{api_port}/healthz"),
        format!("http://{other_addr}:8000/"),
        "http://meta.test/".to_string(),
        "http://loop.test:8081/".to_string(),
    ];
    // Everything allowed, nothing denied: the floor still holds.
    let open = policy(
        true,
        &[
            "169.254.0.0/16",
            "127.0.0.0/8",
            &inet_range().to_string(),
            &lab_pool().to_string(),
        ],
        &[],
    );
    let id = sandbox_net(&c, Some(open), &[]).await;
    // The other sandbox's server is up (it answers itself).
    let mut up = false;
    for _ in 0..50 {
        if curl(&c, &other, "http://127.0.0.1:8000/").await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the other sandbox's server never answered itself");
    let mut events = Box::pin(c.events(None));
    for t in &targets {
        let got = curl(&c, &id, t).await;
        assert!(got.is_err(), "{t} reachable: {got:?}");
    }
    // The control plane's refusal shows up as a `network.denied` event naming the sandbox
    // and the destination.
    let want = format!("{host_ip}:{api_port}");
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            let ev = ev.expect("event");
            if ev.kind == EventType::NetworkDenied
                && ev.sandbox_id == id
                && ev.destination.as_deref().is_some_and(|d| d.contains(&want))
            {
                return ev;
            }
        }
        panic!("event stream ended")
    })
    .await
    .expect("a network.denied event for the control plane");
    assert_eq!(found.reason.as_deref(), Some("floor"));
    delete(&c, &id).await;
    delete(&c, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_put_applies_to_the_next_connection() {
    let c = c();
    let id = sandbox_net(&c, None, &[]).await;
    assert!(curl(&c, &id, &web(WEB_B)).await.is_ok());
    // A long download keeps going across the change (open connections are not cut).
    c.create_command(
        &id,
        &cove_api_types::CreateCommandRequest {
            shell: Some(format!(
                "curl -sS --limit-rate 2M -o /tmp/big http://{WEB_B}/bytes/4000000; echo $? > /tmp/big.rc"
            )),
            ..Default::default()
        },
    )
    .await
    .expect("download");
    // The download has begun (its first bytes are written) before the policy changes: a fixed
    // pause is too short where processes start slowly (gVisor's ptrace platform under load).
    let began = std::time::Instant::now();
    while sh(&c, &id, "[ -s /tmp/big ] && echo yes")
        .await
        .stdout_text()
        .is_empty()
    {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the download never began"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let set = c
        .set_sandbox_network(&id, &policy(true, &[], &[&WEB_B.to_string()]))
        .await
        .expect("put");
    assert!(set.enforced);
    assert_eq!(set.network.deny[0].to_string(), WEB_B.to_string());
    assert!(
        curl(&c, &id, &web(WEB_B)).await.is_err(),
        "the next connection is denied"
    );
    assert!(
        curl(&c, &id, &web(WEB_A)).await.is_ok(),
        "the rest stays open"
    );
    let shown = c.get_sandbox(&id).await.expect("get");
    assert_eq!(shown.network, set.network, "GET shows the new policy");
    c.set_sandbox_network(&id, &EgressPolicy::default())
        .await
        .expect("put back");
    assert!(curl(&c, &id, &web(WEB_B)).await.is_ok(), "open again");
    let mut rc = String::new();
    for _ in 0..100 {
        rc = sh(
            &c,
            &id,
            // `wc`, not coreutils' `stat` (whose statx flags gVisor 2022 refuses).
            "cat /tmp/big.rc 2>/dev/null; wc -c < /tmp/big 2>/dev/null",
        )
        .await
        .stdout_text();
        if rc.lines().count() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(rc, "0\n4000000\n", "the open download finished");
    let net = c.sandbox_network(&id).await.expect("network");
    assert!(net.counters.connections_allowed >= 4, "{:?}", net.counters);
    assert!(net.counters.connections_denied >= 1, "{:?}", net.counters);
    assert!(net.counters.bytes_in >= 4_000_000, "{:?}", net.counters);
    assert!(net.counters.bytes_out > 0, "{:?}", net.counters);

    // Bad entries are refused with a stable code, naming the entry.
    let raw = reqwest::Client::new()
        .put(format!(
            "{}/v1/sandboxes/{id}/network",
            server_with(tweak).api_url
        ))
        .bearer_auth(&server_with(tweak).token)
        .json(&serde_json::json!({"allow": ["10.0.0.0/33"]}))
        .send()
        .await
        .expect("put");
    assert_eq!(raw.status(), 400);
    let body: serde_json::Value = raw.json().await.expect("json");
    assert_eq!(body["code"], "invalid_argument", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("10.0.0.0/33"),
        "{body}"
    );

    // Suspend releases the network; wake attaches it again with the stored policy.
    c.set_sandbox_network(&id, &policy(true, &[], &[&WEB_B.to_string()]))
        .await
        .expect("put");
    let before = c.sandbox_network(&id).await.expect("network").counters;
    let op = c.suspend_sandbox(&id).await.expect("suspend");
    c.wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("suspended");
    let net = c.sandbox_network(&id).await.expect("network");
    assert!(!net.enforced, "no network while suspended");
    let op = c.wake_sandbox(&id).await.expect("wake");
    c.wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("woken");
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    // The counters carried on through the suspend and wake (nothing was sent since).
    let after = c.sandbox_network(&id).await.expect("network").counters;
    assert_eq!(after, before, "counters survive a wake");
    assert!(
        curl(&c, &id, &web(WEB_B)).await.is_err(),
        "the policy came back"
    );
    assert!(
        curl(&c, &id, &web(WEB_A)).await.is_ok(),
        "and the network with it"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_policies_are_refused_at_create() {
    let s = server_with(tweak);
    let http = reqwest::Client::new();
    for (body, needle) in [
        (
            serde_json::json!({"network": {"allow": ["10.0.0.0/33"]}}),
            "network",
        ),
        (
            serde_json::json!({"network": {"deny": ["not a host"]}}),
            "network",
        ),
        (
            serde_json::json!({"network": {"allow": ["2001:db8::/32"]}}),
            "IPv6",
        ),
        (
            serde_json::json!({"secrets": {"K": {"value": "v", "hosts": ["10.0.0.1"]}}}),
            "secrets.K.hosts",
        ),
        (
            serde_json::json!({"secrets": {"1K": {"value": "v", "hosts": ["a.test"]}}}),
            "secrets",
        ),
        (
            serde_json::json!({"env": {"K": "x"}, "secrets": {"K": {"value": "v", "hosts": ["a.test"]}}}),
            "secrets.K",
        ),
    ] {
        let resp = http
            .post(format!("{}/v1/sandboxes", s.api_url))
            .bearer_auth(&s.token)
            .json(&body)
            .send()
            .await
            .expect("post");
        assert_eq!(resp.status(), 400, "{body}");
        let err: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(err["code"], "invalid_argument", "{body}: {err}");
        assert!(
            err["message"].as_str().unwrap_or("").contains(needle),
            "{body}: {err}"
        );
    }
    // A typed client sees the same code.
    let c = c();
    match c.sandbox_network("sb-doesnotexist0000").await {
        Err(ClientError::Api { body, .. }) => assert_eq!(body.code, ErrorCode::SandboxNotFound),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_its_host_only_and_never_rests_in_clear() {
    const VALUE: &str = "sk-live-0123456789abcdef";
    let c = c();
    let id = sandbox_net(&c, None, &[("API_KEY", VALUE, &["allowed.test"])]).await;
    // The sandbox holds the placeholder only.
    let env = sh(&c, &id, "printf %s \"$API_KEY\"").await.stdout_text();
    assert!(env.starts_with("cove-placeholder-"), "{env}");
    assert!(!env.contains(VALUE));
    let all_env = sh(&c, &id, "env; cat /proc/1/environ | tr '\\0' '\\n'")
        .await
        .stdout_text();
    assert!(
        !all_env.contains(VALUE),
        "the value is nowhere in the sandbox's environment"
    );
    // The HTTPS API it is meant for sees the value (the sandbox trusts the gateway's CA through
    // its system trust store: no --cacert); its echo of the header comes back to the sandbox
    // with the placeholder in the value's place (issue 27, finding 6).
    let auth = "-H \"Authorization: Bearer $API_KEY\"";
    // This sandbox's only (its value or its placeholder): other tests of this binary send
    // to the same servers meanwhile.
    let received = || {
        fake_internet()
            .seen
            .authorizations()
            .into_iter()
            .filter(|a| a.contains(VALUE) || a.contains(env.as_str()))
            .collect::<Vec<_>>()
    };
    let before = received().len();
    assert_eq!(
        curl(&c, &id, &format!("{auth} https://allowed.test/"))
            .await
            .as_deref(),
        Ok(format!("site=tls-allowed.test host=allowed.test auth=Bearer {env}").as_str())
    );
    assert_eq!(
        received()[before..],
        [format!("Bearer {VALUE}")],
        "the server received the value"
    );
    let py = sh(
        &c,
        &id,
        "python3 -c \"import os, urllib.request as u; \
         r=u.Request('https://allowed.test/', headers={'X-Key': os.environ['API_KEY'], \
         'Authorization': 'Bearer ' + os.environ['API_KEY']}); \
         print(u.urlopen(r, timeout=8).read().decode())\"",
    )
    .await;
    assert_eq!(
        py.stdout_text().trim(),
        format!("site=tls-allowed.test host=allowed.test auth=Bearer {env}"),
        "{}",
        py.stderr_text()
    );
    assert_eq!(received().last(), Some(&format!("Bearer {VALUE}")));
    // Other hosts get the placeholder: plain HTTP, and HTTPS to another name on the same IP.
    let plain = curl(&c, &id, &format!("{auth} http://b.test/"))
        .await
        .expect("http");
    assert_eq!(plain, format!("site=web-b host=b.test auth=Bearer {env}"));
    let other = curl(
        &c,
        &id,
        &format!("{auth} --cacert /tmp/lab-ca.pem https://other.test/"),
    )
    .await
    .expect("https other");
    assert_eq!(
        other,
        format!("site=tls-other.test host=other.test auth=Bearer {env}")
    );

    // The API shows names and hosts, never the value.
    let shown = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        shown.secrets["API_KEY"].hosts[0].to_string(),
        "allowed.test"
    );
    let json = serde_json::to_string(&shown).expect("json");
    assert!(!json.contains(VALUE), "{json}");
    assert!(!json.contains(&env), "nor the placeholder: {json}");
    // Neither the store nor anything else in the data dir holds it in clear.
    let data_dir = &server_with(tweak).data_dir;
    for f in ["store.db", "store.db-wal"] {
        if let Ok(bytes) = std::fs::read(data_dir.join(f)) {
            assert!(
                !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                "{f} holds the secret in clear"
            );
        }
    }
    // A wake re-arms the substitution (the sealed value comes back from the store).
    let op = c.suspend_sandbox(&id).await.expect("suspend");
    c.wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("suspended");
    let op = c.wake_sandbox(&id).await.expect("wake");
    c.wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("woken");
    let env2 = sh(&c, &id, "printf %s \"$API_KEY\"").await.stdout_text();
    assert!(env2.starts_with("cove-placeholder-"), "{env2}");
    assert_eq!(
        curl(&c, &id, &format!("{auth} https://allowed.test/"))
            .await
            .as_deref(),
        Ok(format!("site=tls-allowed.test host=allowed.test auth=Bearer {env2}").as_str()),
        "after a wake"
    );
    assert_eq!(
        received().last(),
        Some(&format!("Bearer {VALUE}")),
        "after a wake"
    );
    delete(&c, &id).await;
}

/// Issue 30: a create with a secret is served by a warm pool member (booted trusting its
/// gateway CA), and the secret behaves as on a cold create: the placeholder in the command's
/// environment, the value at its HTTPS host through the system trust store, the placeholder
/// elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_create_with_a_secret_is_served_warm_and_substituted() {
    const VALUE: &str = "sk-pooled-0123456789abcdef";
    let c = c();
    cove_e2e::ensure_template(&c, "base").await;
    // A size no other test of this binary asks for: only this test's create matches.
    let size = Some(cove_api_types::ResourcesRequest {
        memory_mib: Some(304),
        ..Default::default()
    });
    let put = cove_api_types::PutPoolRequest {
        template: "base".into(),
        release: None,
        resources: size.clone(),
        min_ready: 1,
        max: 1,
    };
    c.put_pool("e2e-net-warm", &put).await.expect("put pool");
    let start = std::time::Instant::now();
    while c.pool("e2e-net-warm").await.expect("pool").ready < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pool never filled"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut req = net_req(None, &[("API_KEY", VALUE, &["allowed.test"])]);
    req.template = Some("base".into());
    req.resources = size;
    let created = c.create_sandbox(&req, None).await.expect("create");
    let id = created.sandbox.id.clone();
    assert_eq!(
        created.sandbox.state,
        SandboxState::Running,
        "served by the pool"
    );
    assert_eq!(
        c.pool("e2e-net-warm").await.expect("pool").hits,
        1,
        "a claim"
    );
    c.delete_pool("e2e-net-warm").await.expect("delete pool");

    let env = sh(&c, &id, "printf %s \"$API_KEY\"").await.stdout_text();
    assert!(env.starts_with("cove-placeholder-"), "{env}");
    let auth = "-H \"Authorization: Bearer $API_KEY\"";
    let received = || fake_internet().seen.authorizations();
    let before = received().len();
    assert_eq!(
        curl(&c, &id, &format!("{auth} https://allowed.test/"))
            .await
            .as_deref(),
        Ok(format!("site=tls-allowed.test host=allowed.test auth=Bearer {env}").as_str()),
        "the sandbox trusts its gateway CA without --cacert"
    );
    // (Other tests of this binary may send meanwhile: this one's value is among what came.)
    assert!(
        received()[before..].contains(&format!("Bearer {VALUE}")),
        "the server received the value"
    );
    let plain = curl(&c, &id, &format!("{auth} http://b.test/"))
        .await
        .expect("http");
    assert_eq!(plain, format!("site=web-b host=b.test auth=Bearer {env}"));
    let shown = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        shown.secrets["API_KEY"].hosts[0].to_string(),
        "allowed.test"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_template_has_the_tools_these_tests_use() {
    let c = c();
    let id = cove_e2e::sandbox(&c, "base").await;
    let out = sh(&c, &id, "command -v curl python3 getent").await;
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stdout_text());
    let caps = c.capabilities().await.expect("caps");
    assert!(caps.network, "networking is on for this server");
    delete(&c, &id).await;
}

/// A tiny HTTP server for the sandbox: answers every request with its method, path, the
/// headers it cares about and its body, as JSON.
const ECHO_SERVER: &str = r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
            "authorization": self.headers.get("authorization"),
            "token": self.headers.get("x-cove-port-token"),
            "prefix": self.headers.get("x-forwarded-prefix")}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("content-type", "application/json")
        self.send_header("x-app", "echo")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = answer
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_port_is_proxied_privately() {
    let c = c();
    let s = server_with(tweak);
    let id = sandbox_net(&c, None, &[]).await;
    c.upload(&id, "/tmp/echo.py", ECHO_SERVER, &UploadOptions::default())
        .await
        .expect("upload");
    c.create_command(
        &id,
        &cove_api_types::CreateCommandRequest {
            shell: Some("exec python3 /tmp/echo.py".into()),
            ..Default::default()
        },
    )
    .await
    .expect("serve");
    let http = reqwest::Client::new();
    let base = format!("{}/v1/sandboxes/{id}/ports", s.api_url);
    // Wait for the server to listen (a 502 until then).
    let mut status = 0;
    for _ in 0..100 {
        let r = http
            .get(format!("{base}/8000/"))
            .bearer_auth(&s.token)
            .send()
            .await
            .expect("get");
        status = r.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status, 200,
        "the echo server never answered through the proxy"
    );

    // The admin token: path and query pass, the Authorization header does not.
    let r = http
        .get(format!("{base}/8000/a/b.txt?x=1&y=two"))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-app"], "echo");
    let got: serde_json::Value = r.json().await.expect("json");
    assert_eq!(got["path"], "/a/b.txt?x=1&y=two");
    assert_eq!(got["authorization"], serde_json::Value::Null, "{got}");
    assert_eq!(got["prefix"], format!("/v1/sandboxes/{id}/ports/8000"));

    // Private by default: no token, a wrong token, another sandbox's token.
    let r = http.get(format!("{base}/8000/")).send().await.expect("get");
    assert_eq!(r.status(), 401);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], "unauthorized");
    let r = http
        .get(format!("{base}/8000/"))
        .header("x-cove-port-token", "0123456789abcdef0123456789abcdef")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 401);

    // The port token (header or query) works without the admin token; the application's own
    // Authorization passes; the token itself does not.
    let access = http
        .get(&base)
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("ports")
        .json::<serde_json::Value>()
        .await
        .expect("json");
    let token = access["token"].as_str().expect("token").to_string();
    assert_eq!(access["path"], format!("/v1/sandboxes/{id}/ports/"));
    let r = http
        .post(format!("{base}/8000/submit"))
        .header("x-cove-port-token", &token)
        .header("authorization", "Basic app-credentials")
        .body("payload=1")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let got: serde_json::Value = r.json().await.expect("json");
    assert_eq!(got["method"], "POST");
    assert_eq!(got["body"], "payload=1");
    assert_eq!(got["authorization"], "Basic app-credentials");
    assert_eq!(
        got["token"],
        serde_json::Value::Null,
        "the port token is not passed on"
    );
    let r = http
        .get(format!("{base}/8000/q?cove_port_token={token}&keep=1"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let got: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        got["path"], "/q?keep=1",
        "the token is taken out of the query"
    );

    // Nothing listening: 502 with a JSON body.
    let r = http
        .get(format!("{base}/8001/"))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 502);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], "bad_gateway", "{body}");
    assert!(
        body["message"].as_str().unwrap_or("").contains("8001"),
        "{body}"
    );
    delete(&c, &id).await;
}
