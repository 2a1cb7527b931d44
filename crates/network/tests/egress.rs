//! The egress gateway against a fake internet: policy, floor, DNS, live changes, counters and
//! denied events. Needs root; everything runs in namespaces the test creates.

mod support;

use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cove_network::lab::{
    inet_range, lab_pool, DNS_ADDR, HOST_SERVICE_PORT, METADATA, UP_ADDR, WEB_A, WEB_B,
};
use cove_network::{DeniedReason, EgressPolicy};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use support::{dns, http, https, policy, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internet_on_then_off() {
    let fx = Fixture::new("eon").await;
    let gw = fx.net().config().gateway();
    let sbx = fx.sandbox("on", EgressPolicy::default()).await;
    let mut events = fx.net().denied_events();

    let body = http(&sbx, WEB_A, 80, "allowed.test")
        .await
        .expect("http with internet on");
    assert_eq!(body, "site=web-a host=allowed.test");
    let body = https(&sbx, WEB_A, "other.test", &fx.lab().ca_pem)
        .await
        .expect("https with internet on");
    assert!(body.starts_with("site=tls-other.test"), "{body}");
    let a = dns(&sbx, gw, "b.test").await.expect("dns answer");
    assert_eq!((a.code, a.ips), (ResponseCode::NoError, vec![WEB_B.ip()]));

    fx.net()
        .set_policy("on", EgressPolicy::offline())
        .expect("set policy");
    let before = fx.lab().dns_queries.load(Ordering::Relaxed);
    assert!(
        http(&sbx, WEB_A, 80, "allowed.test").await.is_err(),
        "http with internet off"
    );
    assert!(
        https(&sbx, WEB_A, "allowed.test", &fx.lab().ca_pem)
            .await
            .is_err(),
        "https with internet off"
    );
    let a = dns(&sbx, gw, "b.test").await.expect("dns answer");
    assert_eq!(a.code, ResponseCode::Refused);
    assert!(a.ips.is_empty());
    assert_eq!(
        fx.lab().dns_queries.load(Ordering::Relaxed),
        before,
        "internet off must not ask upstream"
    );

    let c = fx.net().counters("on").expect("counters");
    assert_eq!(c.connections_allowed, 2, "{c:?}");
    assert_eq!(c.connections_denied, 2, "{c:?}");
    assert_eq!((c.dns_answered, c.dns_refused), (1, 1), "{c:?}");
    assert!(c.bytes_in > 100 && c.bytes_out > 50, "{c:?}");

    let ev = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .expect("event in time")
        .expect("event");
    assert_eq!(ev.sandbox_id, "on");
    assert_eq!(ev.destination, format!("allowed.test ({WEB_A}:80)"));
    assert_eq!(ev.reason, DeniedReason::NotAllowed);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_one_domain_opens_only_that_name() {
    let fx = Fixture::new("edom").await;
    let gw = fx.net().config().gateway();
    let ca = fx.lab().ca_pem.clone();
    let sbx = fx
        .sandbox("dom", policy(false, &["allowed.test"], &[]))
        .await;

    assert_eq!(
        dns(&sbx, gw, "allowed.test").await.expect("dns").ips,
        vec![WEB_A.ip()]
    );
    assert_eq!(
        dns(&sbx, gw, "other.test").await.expect("dns").code,
        ResponseCode::Refused
    );

    assert!(https(&sbx, WEB_A, "allowed.test", &ca)
        .await
        .expect("allowed sni")
        .starts_with("site=tls-allowed.test"));
    assert!(
        http(&sbx, WEB_A, 80, "allowed.test").await.is_ok(),
        "allowed Host"
    );
    // Same IP, another name: refused.
    assert!(
        https(&sbx, WEB_A, "other.test", &ca).await.is_err(),
        "other SNI on the same IP"
    );
    let other = http(&sbx, WEB_A, 80, "other.test").await;
    assert!(
        other.as_ref().is_err_and(|e| e.contains("403")),
        "{other:?}"
    );
    // The raw IP, with and without a Host header.
    assert!(
        http(&sbx, WEB_A, 80, &WEB_A.to_string()).await.is_err(),
        "raw IP as Host"
    );
    let ns = sbx.clone();
    let raw = tokio::task::spawn_blocking(move || {
        cove_network::lab::check_route(&ns, WEB_A.ip()).expect("route");
        cove_network::run_in_netns(&ns, || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect_timeout(
                &SocketAddrV4::new(WEB_A.ip(), 80).into(),
                support::TIMEOUT,
            )
            .ok()?;
            s.set_read_timeout(Some(support::TIMEOUT)).ok()?;
            s.write_all(b"\x00\x01 not http\r\n\r\n").ok()?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).ok()?;
            Some(String::from_utf8_lossy(&buf).into_owned())
        })
    })
    .await
    .expect("join")
    .expect("netns");
    // Refused: closed, or the gateway's 403 (never the server's answer).
    assert!(
        raw.as_ref().is_none_or(|r| !r.contains("site=")),
        "nameless connection reached the server: {raw:?}"
    );
    // The allowed name toward an address it does not resolve to (fronting): refused.
    assert!(
        http(&sbx, WEB_B, 80, "allowed.test").await.is_err(),
        "allowed Host toward another IP"
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_wins_inside_allowed_range_and_for_domains() {
    let fx = Fixture::new("edeny").await;
    let gw = fx.net().config().gateway();
    let sbx = fx
        .sandbox(
            "deny",
            policy(
                false,
                &[&inet_range().to_string()],
                &[&format!("{WEB_B}/32")],
            ),
        )
        .await;
    assert!(
        http(&sbx, WEB_A, 80, "x.test").await.is_ok(),
        "allowed range"
    );
    assert!(
        http(&sbx, WEB_B, 80, "x.test").await.is_err(),
        "denied CIDR inside the allowed range"
    );

    fx.net()
        .set_policy("deny", policy(true, &[], &["*.sub.test"]))
        .expect("set");
    assert!(http(&sbx, WEB_B, 80, "b.test").await.is_ok(), "not denied");
    assert!(
        http(&sbx, WEB_B, 80, "api.sub.test").await.is_err(),
        "denied wildcard by Host"
    );
    assert_eq!(
        dns(&sbx, gw, "api.sub.test").await.expect("dns").code,
        ResponseCode::Refused
    );
    assert_eq!(
        dns(&sbx, gw, "b.test").await.expect("dns").ips,
        vec![WEB_B.ip()]
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floor_stays_closed_whatever_the_policy() {
    let fx = Fixture::new("eflr").await;
    let gw = fx.net().config().gateway();
    let lab = fx.lab();
    // Without the gateway these are reachable: from the upstream ("host") namespace itself.
    assert!(http(&lab.upstream_ns, METADATA, 80, "meta")
        .await
        .expect("metadata from the host")
        .starts_with("site=metadata"));
    assert!(
        http(&lab.upstream_ns, UP_ADDR, HOST_SERVICE_PORT, "h")
            .await
            .is_ok(),
        "host service from the host"
    );

    let open = policy(
        true,
        &[
            "169.254.169.254",
            &UP_ADDR.to_string(),
            &lab_pool().to_string(),
            "127.0.0.1",
        ],
        &[],
    );
    let a = fx.sandbox("flra", open.clone()).await;
    let b_att = fx.net().attach("flrb", open).await.expect("attach b");
    let mut events = fx.net().denied_events();

    assert!(http(&a, METADATA, 80, "meta").await.is_err(), "metadata");
    let ev = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .expect("event")
        .expect("event");
    assert_eq!(
        (ev.reason, ev.destination.as_str()),
        (DeniedReason::Floor, "meta (169.254.169.254:80)")
    );
    assert!(
        http(&a, UP_ADDR, HOST_SERVICE_PORT, "h").await.is_err(),
        "host address"
    );
    assert!(
        http(&a, gw, HOST_SERVICE_PORT, "h").await.is_err(),
        "gateway address"
    );
    // Straight at the proxy port: not DNATed, so nft drops it before the proxy sees it.
    assert!(
        http(&a, gw, 15001, "h").await.is_err(),
        "gateway proxy port directly"
    );

    // Another sandbox, with a server listening inside it.
    let b_ns = b_att.netns.clone();
    let server = tokio::task::spawn_blocking(move || {
        cove_network::run_in_netns(&b_ns, || {
            let l = std::net::TcpListener::bind("0.0.0.0:9000").expect("bind in b");
            l.set_nonblocking(true).expect("nonblocking");
            let deadline = std::time::Instant::now() + Duration::from_secs(6);
            let mut accepted = 0;
            while std::time::Instant::now() < deadline && accepted < 1 {
                if l.accept().is_ok() {
                    accepted += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            accepted
        })
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        http(&a, b_att.address, 9000, "b").await.is_err(),
        "another sandbox"
    );
    // The same server is reachable from inside b (so the refusal above is the gateway's).
    let _ = http(&b_att.netns, std::net::Ipv4Addr::LOCALHOST, 9000, "b").await;
    assert_eq!(
        server.await.expect("join").expect("netns"),
        1,
        "b's own loopback connection arrives"
    );

    // DNS: a name resolving to loopback only reaches the sandbox's own loopback (nothing there);
    // port 53 anywhere but the gateway is dropped.
    assert_eq!(
        dns(&a, gw, "loop.test").await.expect("dns").ips,
        vec![std::net::Ipv4Addr::LOCALHOST]
    );
    assert!(
        http(
            &a,
            std::net::Ipv4Addr::LOCALHOST,
            HOST_SERVICE_PORT,
            "loop.test"
        )
        .await
        .is_err(),
        "loopback"
    );
    assert!(
        dns(&a, DNS_ADDR, "b.test").await.is_err(),
        "udp 53 to another server"
    );
    assert!(
        dns(&a, WEB_A, "b.test").await.is_err(),
        "udp 53 to another server"
    );
    assert!(
        http(&a, DNS_ADDR, 53, "dns").await.is_err(),
        "tcp 53 to another server"
    );
    let mut seen = Vec::new();
    while let Ok(ev) = events.try_recv() {
        seen.push(ev.destination);
    }
    // The gateway reads what a refused client sends first (to answer it), so the
    // destination names the Host it carried.
    assert_eq!(
        seen,
        [
            format!("h ({UP_ADDR}:8081)"),
            format!("h ({}:8081)", fx.net().config().gateway()),
            format!("b ({}:9000)", b_att.address)
        ]
    );
    let c = fx.net().counters("flra").expect("counters");
    assert!(
        c.connections_denied == 4 && c.connections_allowed == 0,
        "{c:?}"
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_policy_change_applies_to_the_next_connection() {
    let fx = Fixture::new("elive").await;
    let gw = fx.net().config().gateway();
    let sbx = fx.sandbox("live", EgressPolicy::default()).await;
    assert!(http(&sbx, WEB_A, 80, "a").await.is_ok());
    fx.net()
        .set_policy("live", policy(true, &[], &[&WEB_A.to_string()]))
        .expect("set");
    assert!(
        http(&sbx, WEB_A, 80, "a").await.is_err(),
        "denied right after the change"
    );
    assert!(
        http(&sbx, WEB_B, 80, "b").await.is_ok(),
        "others still open"
    );
    fx.net()
        .set_policy("live", policy(false, &["b.test"], &[]))
        .expect("set");
    assert_eq!(
        fx.net().policy("live").expect("get"),
        policy(false, &["b.test"], &[])
    );
    assert!(
        http(&sbx, WEB_B, 80, "x.test").await.is_err(),
        "only b.test now"
    );
    assert_eq!(
        dns(&sbx, gw, "allowed.test").await.expect("dns").code,
        ResponseCode::Refused
    );
    assert_eq!(
        dns(&sbx, gw, "b.test").await.expect("dns").ips,
        vec![WEB_B.ip()]
    );
    assert!(http(&sbx, WEB_B, 80, "b.test").await.is_ok());
    fx.net()
        .set_policy("live", EgressPolicy::default())
        .expect("set");
    assert!(http(&sbx, WEB_A, 80, "a").await.is_ok(), "open again");
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_download_arrives_whole_and_is_counted() {
    let fx = Fixture::new("ebig").await;
    let sbx = fx.sandbox("big", EgressPolicy::default()).await;
    let n: usize = 12 * 1024 * 1024 + 7;
    let (ns, path) = (sbx.clone(), format!("/bytes/{n}"));
    let got = tokio::task::spawn_blocking(move || {
        cove_network::lab::http_download(
            &ns,
            SocketAddrV4::new(WEB_A.ip(), 80),
            "big.test",
            &path,
            Duration::from_secs(60),
        )
    })
    .await
    .expect("join")
    .expect("route")
    .expect("download through the gateway");
    assert_eq!(got.bytes, n as u64);
    assert_eq!(got.nonzero, 0);
    // The response head and the request are the only bytes besides the body.
    let c = fx.net().counters("big").expect("counters");
    assert!(
        c.bytes_in >= n as u64 && c.bytes_in < n as u64 + 512,
        "{c:?}"
    );
    assert!(c.bytes_out > 20 && c.bytes_out < 512, "{c:?}");
    fx.finish().await;
}

/// Issue 27, finding 5: with internet off and one allowed domain, a name the sandbox puts in a
/// `Host` header, a TLS server name or a DNS question is never looked up upstream unless an
/// allow rule matches it (a lookup would carry `<data>.exfil.test` out through DNS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_names_never_reach_the_upstream_resolver() {
    let fx = Fixture::new("eexf").await;
    let gw = fx.net().config().gateway();
    let ca = fx.lab().ca_pem.clone();
    let sbx = fx
        .sandbox("exf", policy(false, &["allowed.test"], &[]))
        .await;

    let host = http(&sbx, WEB_A, 80, "d4t4-host.exfil.test").await;
    assert!(host.is_err(), "a denied Host was let through: {host:?}");
    let sni = https(&sbx, WEB_A, "d4t4-sni.exfil.test", &ca).await;
    assert!(sni.is_err(), "a denied SNI was let through: {sni:?}");
    let q = dns(&sbx, gw, "d4t4-dns.exfil.test").await.expect("dns");
    assert_eq!(q.code, ResponseCode::Refused);
    // The allowed name still works, looked up as before.
    assert!(http(&sbx, WEB_A, 80, "allowed.test").await.is_ok());
    assert!(https(&sbx, WEB_A, "allowed.test", &ca).await.is_ok());

    // An allowed question carrying data in an additional record: only the question goes on.
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    let name = Name::from_ascii("allowed.test.").expect("name");
    msg.add_query(Query::query(name.clone(), RecordType::A));
    msg.add_additional(Record::from_rdata(
        name,
        60,
        RData::TXT(TXT::new(vec!["d4t4-additional".to_string()])),
    ));
    let ns = sbx.clone();
    let a = tokio::task::spawn_blocking(move || {
        cove_network::lab::dns_exchange(&ns, SocketAddrV4::new(gw, 53), msg, support::TIMEOUT)
    })
    .await
    .expect("join")
    .expect("client setup")
    .expect("dns");
    assert_eq!(a.ips, vec![WEB_A.ip()]);
    let packets = fx.lab().seen.dns_packets();
    assert!(
        packets.iter().all(|p| !p.windows(4).any(|w| w == b"d4t4")),
        "sandbox bytes beyond the question reached the resolver"
    );

    let seen = fx.lab().seen.dns_names();
    assert!(
        seen.iter().all(|n| !n.contains("exfil")),
        "the fake resolver was asked a denied name: {seen:?}"
    );
    assert!(
        seen.iter().any(|n| n == "allowed.test"),
        "the allowed name is looked up: {seen:?}"
    );
    fx.finish().await;
}
