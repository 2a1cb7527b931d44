//! A corporate network's settings and denials that speak, against a fake internet (namespaces
//! the test creates, addresses chosen at run time): an upstream CONNECT proxy every allowed
//! connection goes through; a refused plain-HTTP client gets a 403 with a one-line reason, a
//! refused TLS client the `access_denied` alert, and the event names the rule. Needs root.

mod support;

use std::time::Duration;

use cove_network::lab::{PROXY_ADDR, PROXY_PORT, WEB_A, WEB_B};
use cove_network::{DeniedReason, EgressPolicy, UpstreamProxy};
use support::{http, https, policy, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_proxy_carries_every_allowed_connection_to_the_judged_address() {
    let proxy: UpstreamProxy = format!("http://u:p@{PROXY_ADDR}:{PROXY_PORT}")
        .parse()
        .expect("proxy url");
    let fx = Fixture::new_with("cpx", |c| c.upstream_proxy = Some(proxy)).await;
    let sbx = fx
        .sandbox("px", policy(true, &[], &[&WEB_B.to_string()]))
        .await;
    let body = http(&sbx, WEB_A, 80, "allowed.test")
        .await
        .expect("http through the proxy");
    assert_eq!(body, "site=web-a host=allowed.test");
    let body = https(&sbx, WEB_A, "allowed.test", &fx.lab().ca_pem)
        .await
        .expect("https through the proxy");
    assert!(body.starts_with("site=tls-allowed.test"), "{body}");
    // A Host the sandbox chose never reaches the proxy: the CONNECT names the address.
    let _ = http(&sbx, WEB_A, 80, "internal.corp.test").await;
    assert!(http(&sbx, WEB_B, 80, "b.test").await.is_err(), "denied");
    let seen = fx.lab().seen.proxied();
    let auth = "Basic dTpw".to_string();
    assert_eq!(
        seen,
        [
            (format!("{WEB_A}:80"), auth.clone()),
            (format!("{WEB_A}:443"), auth.clone()),
            (format!("{WEB_A}:80"), auth),
        ],
        "every allowed connection, and only those, through the proxy"
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_refuses_fails_the_connection() {
    // The lab's proxy tunnels only inside the fake internet; port 9 there has no listener.
    let proxy: UpstreamProxy = format!("http://{PROXY_ADDR}:{PROXY_PORT}")
        .parse()
        .expect("proxy url");
    let fx = Fixture::new_with("cpr", |c| c.upstream_proxy = Some(proxy)).await;
    let sbx = fx.sandbox("pr", EgressPolicy::default()).await;
    assert!(http(&sbx, WEB_A, 9, "a").await.is_err());
    assert_eq!(
        fx.lab().seen.proxied().len(),
        1,
        "{:?}",
        fx.lab().seen.proxied()
    );
    assert!(
        http(&sbx, WEB_A, 80, "a").await.is_ok(),
        "the next one works"
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_speak_403_with_a_reason_tls_access_denied_and_the_rule() {
    let fx = Fixture::new("dsp").await;
    let sbx = fx
        .sandbox(
            "dsp",
            policy(true, &[], &[&WEB_B.to_string(), "*.sub.test"]),
        )
        .await;
    let mut events = fx.net().denied_events();

    // Denied by address, decided before a byte is read: the gateway still reads the request
    // to answer it.
    let err = http(&sbx, WEB_B, 80, "b.test").await.expect_err("denied");
    assert!(err.contains("403 Forbidden"), "{err}");
    let reason =
        format!("cove: the sandbox's egress policy denied b.test ({WEB_B}:80): deny {WEB_B}");
    assert!(err.contains(&format!("x-cove-denied: {reason}")), "{err}");
    assert!(err.ends_with(&format!("{reason}\n")), "{err}");
    let ev = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .expect("event in time")
        .expect("event");
    assert_eq!(
        (
            ev.name.as_deref(),
            ev.ip,
            ev.port,
            ev.reason,
            ev.rule.as_str()
        ),
        (
            Some("b.test"),
            Some(WEB_B.ip()),
            Some(80),
            DeniedReason::Denied,
            format!("deny {WEB_B}").as_str()
        )
    );

    // TLS: the access_denied alert, not a reset or an EOF.
    let err = https(&sbx, WEB_B, "b.test", &fx.lab().ca_pem)
        .await
        .expect_err("denied");
    assert!(err.contains("AccessDenied"), "{err}");

    // Denied by name (the Host the request carries).
    let err = http(&sbx, WEB_A, 80, "api.sub.test")
        .await
        .expect_err("denied");
    assert!(
        err.contains("denied api.sub.test (") && err.contains("deny *.sub.test"),
        "{err}"
    );
    let err = https(&sbx, WEB_A, "api.sub.test", &fx.lab().ca_pem)
        .await
        .expect_err("denied");
    assert!(err.contains("AccessDenied"), "{err}");

    // Internet off: the rule says so.
    fx.net()
        .set_policy("dsp", EgressPolicy::offline())
        .expect("set policy");
    let err = http(&sbx, WEB_A, 80, "allowed.test")
        .await
        .expect_err("denied");
    assert!(
        err.contains("internet off and no allow rule names it"),
        "{err}"
    );
    // The floor too.
    let err = http(&sbx, fx.net().config().gateway(), 8081, "gw")
        .await
        .expect_err("denied");
    assert!(err.contains("403") && err.contains("floor"), "{err}");
    fx.finish().await;
}
