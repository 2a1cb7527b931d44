//! Who may reach a sandbox's ports: the port token, one-time links and the cookie they give,
//! `public` on create and live, and the admin token.

use cove_api_types::{CreateSandboxRequest, ErrorCode, PortLinkRequest};
use cove_control_plane::network::SecretsKey;
use cove_control_plane::ports::{PortAccess, PortCredentials, PortsProxy};
use cove_test_support::FakeNode;

use crate::harness::as_system;
use crate::harness::{code, Harness};

async fn with_proxy() -> Harness {
    Harness::with(FakeNode::new(), |cfg| {
        cfg.secrets_key = Some(SecretsKey::new(&[9u8; 32]).expect("key"));
        cfg.ports_proxy = Some(PortsProxy {
            domain: "localhost".into(),
            port: 7704,
        });
    })
    .await
}

fn creds<'a>(token: Option<&'a str>, cookie: Option<&'a str>) -> PortCredentials<'a> {
    PortCredentials {
        bearer: None,
        token,
        cookie,
    }
}

#[tokio::test]
async fn links_work_once_and_their_cookie_opens_one_port_of_one_sandbox() {
    as_system(async {
        let h = with_proxy().await;
        let id = h.running().await;
        let other = h.running().await;
        let ports = h.cp.sandbox_ports(&id).await.expect("ports");
        assert!(!ports.public);
        assert_eq!(
            ports.host.as_deref(),
            Some(format!("{{port}}-{id}.localhost:7704").as_str())
        );

        // Private: nothing, or a wrong token, is refused; the port token passes.
        let none = h.cp.authorize_port(&id, 8000, creds(None, None)).await;
        assert_eq!(code(none.map(|_| ())), ErrorCode::Unauthorized);
        let wrong = h.cp.authorize_port(&id, 8000, creds(Some("x"), None)).await;
        assert_eq!(code(wrong.map(|_| ())), ErrorCode::Unauthorized);
        let by_token =
            h.cp.authorize_port(&id, 8000, creds(Some(&ports.token), None));
        assert_eq!(by_token.await.expect("token"), PortAccess::Token);

        let link =
            h.cp.create_port_link(
                &id,
                &PortLinkRequest {
                    port: 8000,
                    path: Some("/app?x=1".into()),
                },
            )
            .await
            .expect("link");
        let prefix = format!("http://8000-{id}.localhost:7704/app?x=1&cove_link=");
        assert!(link.url.starts_with(&prefix), "{}", link.url);
        let ticket = link.url.trim_start_matches(&prefix).to_string();
        // Not for another port or sandbox (and such a try uses the link up).
        let elsewhere = h.cp.redeem_port_link(&other, 8000, &ticket);
        assert_eq!(code(elsewhere.map(|_| ())), ErrorCode::Unauthorized);
        let link =
            h.cp.create_port_link(
                &id,
                &PortLinkRequest {
                    port: 8000,
                    path: None,
                },
            )
            .await
            .expect("link");
        let ticket = link.url.rsplit_once("cove_link=").expect("ticket").1;
        let cookie = h.cp.redeem_port_link(&id, 8000, ticket).expect("redeemed");
        let again = h.cp.redeem_port_link(&id, 8000, ticket);
        assert_eq!(
            code(again.map(|_| ())),
            ErrorCode::Unauthorized,
            "once only"
        );
        let by_cookie = h.cp.authorize_port(&id, 8000, creds(None, Some(&cookie)));
        assert_eq!(by_cookie.await.expect("cookie"), PortAccess::Cookie);
        for (sandbox, port) in [(&id, 8001), (&other, 8000)] {
            let r =
                h.cp.authorize_port(sandbox, port, creds(None, Some(&cookie)))
                    .await;
            assert_eq!(
                code(r.map(|_| ())),
                ErrorCode::Unauthorized,
                "{sandbox}:{port}"
            );
        }
        let forged = format!("{}0", cookie);
        let r =
            h.cp.authorize_port(&id, 8000, creds(None, Some(&forged)))
                .await;
        assert_eq!(code(r.map(|_| ())), ErrorCode::Unauthorized);

        // Bad input.
        let zero =
            h.cp.create_port_link(
                &id,
                &PortLinkRequest {
                    port: 0,
                    path: None,
                },
            )
            .await;
        assert_eq!(code(zero.map(|_| ())), ErrorCode::InvalidArgument);
        let bad_path =
            h.cp.create_port_link(
                &id,
                &PortLinkRequest {
                    port: 80,
                    path: Some("no-slash".into()),
                },
            )
            .await;
        assert_eq!(code(bad_path.map(|_| ())), ErrorCode::InvalidArgument);
    })
    .await;
}

#[tokio::test]
async fn public_on_create_and_live() {
    as_system(async {
        let h = with_proxy().await;
        let id = h
            .running_with(CreateSandboxRequest {
                public: true,
                ..Default::default()
            })
            .await;
        assert!(h.cp.get_sandbox(&id).await.expect("get").public);
        let open = h.cp.authorize_port(&id, 3000, creds(None, None)).await;
        assert_eq!(open.expect("public"), PortAccess::Public);
        assert!(
            !h.cp
                .set_ports_public(&id, false)
                .await
                .expect("private")
                .public
        );
        let closed = h.cp.authorize_port(&id, 3000, creds(None, None)).await;
        assert_eq!(code(closed.map(|_| ())), ErrorCode::Unauthorized);
        assert!(
            h.cp.set_ports_public(&id, true)
                .await
                .expect("public")
                .public
        );
        assert!(h.cp.get_sandbox(&id).await.expect("get").public);
    })
    .await;
}

#[tokio::test]
async fn links_need_a_proxy_listener() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.secrets_key = Some(SecretsKey::new(&[9u8; 32]).expect("key"));
        })
        .await;
        let id = h.running().await;
        assert_eq!(h.cp.sandbox_ports(&id).await.expect("ports").host, None);
        let link =
            h.cp.create_port_link(
                &id,
                &PortLinkRequest {
                    port: 80,
                    path: None,
                },
            )
            .await;
        assert_eq!(code(link.map(|_| ())), ErrorCode::NotImplemented);
    })
    .await;
}
