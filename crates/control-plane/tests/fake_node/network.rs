//! Sandbox networks: the egress policy on create, `GET`/`PUT` of it, a node without networks,
//! secrets sealed in the store and handed to the node, `network.denied` events.

use std::collections::BTreeMap;
use std::time::Duration;

use cove_api_types::{CreateSandboxRequest, EgressPolicy, ErrorCode, EventType, SecretRequest};
use cove_control_plane::network::SecretsKey;
use cove_node_api::NodeCapabilities;
use cove_test_support::FakeNode;
use futures::StreamExt;

use crate::harness::as_system;
use crate::harness::{code, Harness};
use cove_control_plane::LifecycleVerb::{Suspend, Wake};

fn policy(internet: bool, allow: &[&str], deny: &[&str]) -> EgressPolicy {
    EgressPolicy::parse(internet, allow, deny).expect("policy")
}

fn secret(value: &str, host: &str) -> SecretRequest {
    SecretRequest {
        value: value.into(),
        hosts: vec![host.parse().expect("host")],
    }
}

async fn with_key() -> Harness {
    Harness::with(FakeNode::new(), |cfg| {
        cfg.secrets_key = Some(SecretsKey::new(&[7u8; 32]).expect("key"));
    })
    .await
}

#[tokio::test]
async fn the_policy_goes_to_the_node_and_a_put_changes_it_live() {
    as_system(async {
        let h = Harness::new().await;
        let p = policy(false, &["pypi.org"], &[]);
        let id = h
            .running_with(CreateSandboxRequest {
                network: Some(p.clone()),
                ..Default::default()
            })
            .await;
        assert_eq!(h.sandbox(&id).await.network, p);
        assert_eq!(h.node.launch_of(&id).expect("launch").network, p);
        let got = h.cp.sandbox_network(&id).await.expect("get");
        assert!(got.enforced);
        assert_eq!(got.network, p);

        let open = policy(true, &[], &["10.0.0.0/8"]);
        let set =
            h.cp.set_sandbox_network(&id, open.clone())
                .await
                .expect("put");
        assert_eq!(set.network, open);
        assert_eq!(
            h.node.network_policy(&id),
            Some(open.clone()),
            "the node has it now"
        );
        assert_eq!(h.sandbox(&id).await.network, open, "and the store");

        // Suspended: stored, not enforced; the wake launches with it.
        h.apply(&id, Suspend).await;
        let offline = EgressPolicy::offline();
        let set =
            h.cp.set_sandbox_network(&id, offline.clone())
                .await
                .expect("put");
        assert!(!set.enforced);
        assert_eq!(set.network, offline);
        h.apply(&id, Wake).await;
        assert_eq!(h.node.launch_of(&id).expect("launch").network, offline);
        assert!(h.cp.sandbox_network(&id).await.expect("get").enforced);

        assert_eq!(
            code(h.cp.sandbox_network("sb-0000000000000000").await),
            ErrorCode::SandboxNotFound
        );
    })
    .await;
}

#[tokio::test]
async fn a_node_without_networks_refuses_policies_and_secrets_up_front() {
    as_system(async {
        let node = FakeNode::with_capabilities(NodeCapabilities {
            runtime: "qemu".into(),
            boundary: "vm".into(),
            pause: true,
            suspend_memory: true,
            snapshot_store: "file".into(),
            network: false,
            user_namespaces: false,
            volumes: false,
            attach_volumes: false,
        });
        let h = Harness::with(node, |cfg| {
            cfg.secrets_key = Some(SecretsKey::new(&[1u8; 32]).expect("key"));
        })
        .await;
        assert!(!h.cp.capabilities().network);
        let refused =
            h.cp.create_sandbox(
                CreateSandboxRequest {
                    network: Some(EgressPolicy::offline()),
                    ..Default::default()
                },
                None,
            )
            .await;
        let err = refused.expect_err("refused");
        assert_eq!(err.code(), ErrorCode::NotImplemented);
        assert!(err.to_string().contains("qemu"), "{err}");
        let refused =
            h.cp.create_sandbox(
                CreateSandboxRequest {
                    secrets: BTreeMap::from([("K".into(), secret("v", "a.test"))]),
                    ..Default::default()
                },
                None,
            )
            .await;
        assert_eq!(code(refused), ErrorCode::NotImplemented);
        // The default policy is fine (loopback only), and so is putting it.
        let id = h.running().await;
        h.cp.set_sandbox_network(&id, EgressPolicy::default())
            .await
            .expect("default policy");
        assert_eq!(
            code(h.cp.set_sandbox_network(&id, EgressPolicy::offline()).await),
            ErrorCode::NotImplemented
        );
    })
    .await;
}

#[tokio::test]
async fn secrets_are_sealed_in_the_store_and_reach_the_node_on_start_and_wake() {
    as_system(async {
        let h = with_key().await;
        let id = h
            .running_with(CreateSandboxRequest {
                secrets: BTreeMap::from([("API_KEY".into(), secret("sk-value-1", "api.test"))]),
                ..Default::default()
            })
            .await;
        let shown = h.sandbox(&id).await;
        assert_eq!(shown.secrets["API_KEY"].hosts[0].to_string(), "api.test");
        assert!(!serde_json::to_string(&shown)
            .expect("json")
            .contains("sk-value-1"));
        let sealed =
            h.cp.store()
                .sealed_secrets(&id)
                .await
                .expect("sealed")
                .expect("stored");
        assert!(
            sealed.starts_with("v1:") && !sealed.contains("sk-value-1"),
            "{sealed}"
        );
        assert_eq!(
            h.node.launch_of(&id).expect("launch").secrets["API_KEY"].value,
            "sk-value-1"
        );
        h.apply(&id, Suspend).await;
        h.apply(&id, Wake).await;
        assert_eq!(
            h.node.launch_of(&id).expect("launch").secrets["API_KEY"].value,
            "sk-value-1",
            "unsealed again for the wake"
        );
        // The launch's Debug (what a log line would print) hides the value.
        let launch = h.node.launch_of(&id).expect("launch");
        assert!(!format!("{launch:?}").contains("sk-value-1"));
    })
    .await;
}

fn with(secrets: BTreeMap<String, SecretRequest>) -> CreateSandboxRequest {
    CreateSandboxRequest {
        secrets,
        ..Default::default()
    }
}

#[tokio::test]
async fn secrets_need_a_key() {
    as_system(async {
        let h = Harness::new().await;
        let one = BTreeMap::from([("K".to_string(), secret("v", "a.test"))]);
        assert_eq!(
            code(h.cp.create_sandbox(with(one), None).await),
            ErrorCode::NotImplemented,
            "no key: refused"
        );
    })
    .await;
}

#[tokio::test]
async fn secrets_need_valid_names_values_and_domain_hosts() {
    as_system(async {
        let h = with_key().await;
        for bad in [
            BTreeMap::from([("1K".to_string(), secret("v", "a.test"))]),
            BTreeMap::from([("K".to_string(), secret("", "a.test"))]),
            BTreeMap::from([("K".to_string(), secret("a\nb", "a.test"))]),
            BTreeMap::from([("K".to_string(), secret("v", "10.0.0.1"))]),
            BTreeMap::from([(
                "K".to_string(),
                SecretRequest {
                    value: "v".into(),
                    hosts: vec![],
                },
            )]),
        ] {
            assert_eq!(
                code(h.cp.create_sandbox(with(bad.clone()), None).await),
                ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
        let clash = CreateSandboxRequest {
            env: BTreeMap::from([("K".into(), "x".into())]),
            secrets: BTreeMap::from([("K".to_string(), secret("v", "a.test"))]),
            ..Default::default()
        };
        assert_eq!(
            code(h.cp.create_sandbox(clash, None).await),
            ErrorCode::InvalidArgument
        );
    })
    .await;
}

#[tokio::test]
async fn denials_become_rate_limited_network_denied_events() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let controller = cove_control_plane::Controller::start(h.cp.clone());
        h.advance(Duration::ZERO).await;
        for _ in 0..5 {
            h.node.deny(&id, "b.test (203.0.113.20:80)");
        }
        h.node.deny(&id, "203.0.113.99:443");
        let mut log = Vec::new();
        for _ in 0..100 {
            h.advance(Duration::from_millis(1)).await;
            log = h.event_log(&id).await;
            if log
                .iter()
                .filter(|(k, _)| *k == EventType::NetworkDenied)
                .count()
                >= 2
            {
                break;
            }
        }
        let denied: Vec<_> = log
            .iter()
            .filter(|(k, _)| *k == EventType::NetworkDenied)
            .collect();
        assert_eq!(denied.len(), 2, "one per destination: {log:?}");
        let events =
            h.cp.store()
                .events_after(None, 0, 100)
                .await
                .expect("events");
        let dest: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventType::NetworkDenied)
            .map(|e| {
                (
                    e.sandbox_id.as_str(),
                    e.destination.as_deref(),
                    e.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            dest,
            vec![
                (
                    id.as_str(),
                    Some("b.test (203.0.113.20:80)"),
                    Some("denied")
                ),
                (id.as_str(), Some("203.0.113.99:443"), Some("denied")),
            ]
        );
        // The same destination again after the window: recorded again.
        h.advance(Duration::from_secs(11)).await;
        h.node.deny(&id, "b.test (203.0.113.20:80)");
        for _ in 0..100 {
            h.advance(Duration::from_millis(1)).await;
            if h.event_log(&id)
                .await
                .iter()
                .filter(|(k, _)| *k == EventType::NetworkDenied)
                .count()
                == 3
            {
                break;
            }
        }
        assert_eq!(
            h.event_log(&id)
                .await
                .iter()
                .filter(|(k, _)| *k == EventType::NetworkDenied)
                .count(),
            3
        );
        controller.stop().await;
    })
    .await;
}

#[tokio::test]
async fn ports_are_forwarded_to_running_sandboxes_with_a_token_per_sandbox() {
    as_system(async {
        let h = with_key().await;
        let id = h.running().await;
        let other = h.running().await;
        let request = |port| cove_node_api::PortRequest {
            port,
            method: "GET".into(),
            path_and_query: "/x?y=1".into(),
            headers: Vec::new(),
        };
        let empty = || futures::stream::empty().boxed();
        let (head, _) =
            h.cp.forward_port(&id, request(8080), empty())
                .await
                .expect("forwarded");
        assert_eq!(head.status, 200);
        let closed = h.cp.forward_port(&id, request(1), empty()).await;
        assert_eq!(code(closed.map(|_| ())), ErrorCode::BadGateway);
        let token = h.cp.port_token(&id).await.expect("token");
        assert_eq!(token.len(), 32);
        assert!(h.cp.is_port_token(&id, &token));
        assert!(
            !h.cp.is_port_token(&other, &token),
            "tokens are per sandbox"
        );
        assert_eq!(token, h.cp.port_token(&id).await.expect("again"), "stable");
        h.apply(&id, Suspend).await;
        let suspended = h.cp.forward_port(&id, request(8080), empty()).await;
        assert_eq!(code(suspended.map(|_| ())), ErrorCode::SandboxNotRunning);
    })
    .await;
}
