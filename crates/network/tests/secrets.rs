//! Secret substitution through TLS interception. Needs root; runs in namespaces it creates.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddrV4;

use std::net::Ipv4Addr;

use cove_network::lab::{https_get_with, WEB_A, WEB_B};
use cove_network::{EgressPolicy, Secret};
use support::{Fixture, TIMEOUT};

async fn get(ns: &str, sni: &str, ca: &str, auth: &str) -> cove_network::lab::Reply {
    get_at(ns, WEB_A.ip(), sni, ca, auth).await
}

async fn get_at(
    ns: &str,
    ip: Ipv4Addr,
    sni: &str,
    ca: &str,
    auth: &str,
) -> cove_network::lab::Reply {
    let (ns, sni, ca, hdr) = (
        ns.to_string(),
        sni.to_string(),
        ca.to_string(),
        format!("Authorization: {auth}\r\n"),
    );
    tokio::task::spawn_blocking(move || {
        https_get_with(&ns, SocketAddrV4::new(ip, 443), &sni, &ca, &hdr, TIMEOUT)
    })
    .await
    .expect("join")
    .expect("client setup")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_reaches_only_its_host_and_never_the_sandbox() {
    let fx = Fixture::new("ssec").await;
    let sbx = fx.sandbox("sec", EgressPolicy::default()).await;
    let value = "s3cret-value-0123";
    let secrets = BTreeMap::from([(
        "API_KEY".to_string(),
        Secret {
            value: value.to_string(),
            hosts: vec!["allowed.test".parse().expect("rule")],
        },
    )]);
    let ic = fx.net().intercept("sec", secrets).expect("intercept");
    let placeholder = ic.placeholders["API_KEY"].clone();
    assert!(!placeholder.contains(value) && !ic.ca_pem.contains(value));
    assert_eq!(fx.net().ca_pem("sec").expect("ca"), Some(ic.ca_pem.clone()));

    // Toward the listed host the fake API sees the real value; the sandbox sent the placeholder
    // and, although the server echoes the header, gets the placeholder back, never the value.
    let body = get(
        &sbx,
        "allowed.test",
        &ic.ca_pem,
        &format!("Bearer {placeholder}"),
    )
    .await
    .expect("intercepted");
    assert_eq!(
        body,
        format!("site=tls-allowed.test host=allowed.test auth=Bearer {placeholder}")
    );
    assert_eq!(
        fx.lab().seen.authorizations(),
        vec![format!("Bearer {value}")],
        "the server received the value"
    );
    // The sandbox must trust its own CA there: with only the server's real CA it fails.
    assert!(
        get(&sbx, "allowed.test", &fx.lab().ca_pem, "x")
            .await
            .is_err(),
        "interception uses the sandbox CA"
    );
    // Another host (same IP, not listed): end-to-end TLS with the server's real certificate, and
    // it sees the placeholder.
    let body = get(
        &sbx,
        "other.test",
        &fx.lab().ca_pem,
        &format!("Bearer {placeholder}"),
    )
    .await
    .expect("passthrough");
    assert_eq!(
        body,
        format!("site=tls-other.test host=other.test auth=Bearer {placeholder}")
    );

    // Bad secrets are refused.
    let bad = BTreeMap::from([(
        "K".to_string(),
        Secret {
            value: "v".into(),
            hosts: vec![cove_network::lab::inet_range()
                .to_string()
                .parse()
                .expect("rule")],
        },
    )]);
    assert!(
        fx.net().intercept("sec", bad).is_err(),
        "a secret toward an address range"
    );
    let bad = BTreeMap::from([(
        "K".to_string(),
        Secret {
            value: "a\r\nb".into(),
            hosts: vec!["a.test".parse().expect("rule")],
        },
    )]);
    assert!(fx.net().intercept("sec", bad).is_err(), "a value with CRLF");
    let c = fx.net().counters("sec").expect("counters");
    assert_eq!(c.connections_allowed, 3, "{c:?}");

    // Re-armed after a (simulated) node restart with the same CA key and placeholders: the
    // sandbox's old trust store and its old placeholder still work.
    let reuse = cove_network::Reuse {
        ca_key_pem: Some(ic.ca_key_pem.clone()),
        placeholders: ic.placeholders.clone(),
    };
    let again = BTreeMap::from([(
        "API_KEY".to_string(),
        Secret {
            value: value.to_string(),
            hosts: vec!["allowed.test".parse().expect("rule")],
        },
    )]);
    let ic2 = fx
        .net()
        .intercept_with("sec", again, &reuse)
        .expect("re-arm");
    assert_eq!(ic2.placeholders, ic.placeholders);
    assert_eq!(ic2.ca_key_pem, ic.ca_key_pem);
    let body = get(
        &sbx,
        "allowed.test",
        &ic.ca_pem,
        &format!("Bearer {placeholder}"),
    )
    .await
    .expect("the old CA still verifies the re-armed gateway");
    assert_eq!(
        body,
        format!("site=tls-allowed.test host=allowed.test auth=Bearer {placeholder}")
    );
    assert_eq!(
        fx.lab().seen.authorizations().last(),
        Some(&format!("Bearer {value}"))
    );
    assert!(
        !format!("{ic2:?}").contains("PRIVATE KEY"),
        "Debug hides the key"
    );
    fx.finish().await;
}

/// Issue 27, finding 6: with internet on, a connection that carries the secret host's name
/// (SNI) toward another address gets no substitution: the gateway's own lookup of the host
/// gives another address, so the connection stays end-to-end and the server there sees only
/// the placeholder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_host_name_toward_another_address_gets_no_value() {
    let fx = Fixture::new("ssni").await;
    let sbx = fx.sandbox("sni", EgressPolicy::default()).await;
    let value = "s3cret-value-sni-4567";
    let secrets = BTreeMap::from([(
        "API_KEY".to_string(),
        Secret {
            value: value.to_string(),
            hosts: vec!["allowed.test".parse().expect("rule")],
        },
    )]);
    let ic = fx.net().intercept("sni", secrets).expect("intercept");
    let placeholder = ic.placeholders["API_KEY"].clone();
    // Trusting both CAs, the request succeeds whether or not the gateway intercepts; what the
    // server at B (allowed.test resolves to A) receives tells which happened.
    let both = format!("{}\n{}", ic.ca_pem, fx.lab().ca_pem);
    let body = get_at(
        &sbx,
        WEB_B.ip(),
        "allowed.test",
        &both,
        &format!("Bearer {placeholder}"),
    )
    .await
    .expect("end-to-end to B");
    assert_eq!(
        body,
        format!("site=tls-b-allowed.test host=allowed.test auth=Bearer {placeholder}")
    );
    let seen = fx.lab().seen.authorizations();
    assert!(
        seen.iter().all(|a| !a.contains(value)),
        "the value went to an address allowed.test does not resolve to: {seen:?}"
    );
    // Toward A (where allowed.test resolves) the value is still substituted.
    let body = get_at(
        &sbx,
        WEB_A.ip(),
        "allowed.test",
        &both,
        &format!("Bearer {placeholder}"),
    )
    .await
    .expect("intercepted at A");
    assert!(
        body.ends_with(&format!("auth=Bearer {placeholder}")),
        "{body}"
    );
    assert_eq!(
        fx.lab().seen.authorizations().last(),
        Some(&format!("Bearer {value}"))
    );
    fx.finish().await;
}
