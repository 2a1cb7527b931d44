//! Volume content tokens: one reaches its own volume, in its org, as a `VolumeToken` caller
//! that sees no other volume; another volume's token, a tampered one, an API key and the token
//! of a volume deleted and made again under the same name are refused.

use cove_api_types::{CreateVolumeRequest, ErrorCode};
use cove_control_plane::network::SecretsKey;
use cove_control_plane::orgs::scope::{self, Actor};
use cove_control_plane::ServiceError;
use cove_test_support::FakeNode;

use crate::harness::as_system;
use crate::harness::{code, Harness};

fn volume(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        size_mib: 64,
        storage: Default::default(),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, ServiceError>) {
    assert!(
        matches!(r, Err(ServiceError::Unauthorized(_))),
        "expected unauthorized: {r:?}"
    );
}

#[tokio::test]
async fn a_volume_token_reaches_its_own_volume_only() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.secrets_key = Some(SecretsKey::new(&[5u8; 32]).expect("key"));
        })
        .await;
        h.cp.create_volume(volume("one")).await.expect("create");
        h.cp.create_volume(volume("two")).await.expect("create");
        let one = h.cp.volume_token("one").await.expect("token");
        let two = h.cp.volume_token("two").await.expect("token");
        assert!(one.starts_with("cvt1.") && one != two);
        assert_eq!(h.cp.volume_token("one").await.expect("again"), one);

        let caller =
            h.cp.authenticate_volume_token("one", &one)
                .await
                .expect("its own volume");
        assert_eq!(caller.actor, Actor::VolumeToken("volume:one".into()));
        // Scoped as that caller, only that volume exists.
        scope::scoped(caller, async {
            h.cp.get_volume("one").await.expect("visible");
            assert_eq!(
                code(h.cp.get_volume("two").await),
                ErrorCode::VolumeNotFound
            );
        })
        .await;

        refused(h.cp.authenticate_volume_token("two", &one).await);
        refused(h.cp.authenticate_volume_token("missing", &one).await);
        let mut tampered = one.clone();
        tampered.pop();
        tampered.push(if one.ends_with('0') { '1' } else { '0' });
        refused(h.cp.authenticate_volume_token("one", &tampered).await);
        refused(h.cp.authenticate_volume_token("one", "cvt1.default").await);
        refused(h.cp.authenticate_volume_token("one", "an-api-key").await);

        // A volume made again under the same name has a new token.
        h.cp.delete_volume("one").await.expect("delete");
        h.cp.create_volume(volume("one")).await.expect("again");
        refused(h.cp.authenticate_volume_token("one", &one).await);
        let fresh = h.cp.volume_token("one").await.expect("token");
        assert_ne!(fresh, one);
        h.cp.authenticate_volume_token("one", &fresh)
            .await
            .expect("new token");
    })
    .await;
}

#[tokio::test]
async fn without_a_server_key_there_are_no_volume_tokens() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.create_volume(volume("data")).await.expect("create");
        assert_eq!(
            code(h.cp.volume_token("data").await),
            ErrorCode::NotImplemented
        );
    })
    .await;
}
