//! Warm pools against the fake node: the pool controller fills to `min_ready` and never above
//! `max`, a matching create claims a ready member (atomically, also under concurrent creates)
//! and answers `running` with the claim's settings, a miss cold-starts, a new release retires
//! old members, members are adopted after a restart, and deleting a pool drains it.

use std::collections::{BTreeMap, HashSet};

use cove_api_types::{
    CreateSandboxRequest, ErrorCode, OperationState, Pool, PutPoolRequest, ResourcesRequest,
    SandboxState,
};
use cove_control_plane::Controller;
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::{code, eventually, Harness};

fn pool_req(min_ready: u32, max: u32) -> PutPoolRequest {
    PutPoolRequest {
        template: "base".into(),
        release: None,
        resources: None,
        min_ready,
        max,
    }
}

async fn pool(h: &Harness, name: &str) -> Pool {
    h.cp.get_pool(name).await.expect("pool")
}

/// Runs pool passes until pool `name` has `ready` members and none starting.
async fn settled(h: &Harness, name: &str, ready: u32) {
    h.cp.reconcile_pools().await.expect("pool pass");
    eventually(&format!("pool {name} with {ready} ready"), || async {
        let p = pool(h, name).await;
        p.ready == ready && p.starting == 0
    })
    .await;
}

/// Members and claimed sandboxes alike: what the node runs.
fn on_node(h: &Harness) -> usize {
    h.node.sandbox_ids().len()
}

async fn listed(h: &Harness) -> Vec<String> {
    h.cp.list_sandboxes(None, None, vec![], None, None)
        .await
        .expect("list")
        .sandboxes
        .into_iter()
        .map(|s| s.id)
        .collect()
}

#[tokio::test]
async fn the_pool_fills_to_min_ready_and_never_above_max() {
    as_system(async {
        let h = Harness::new().await;
        let p = h.cp.put_pool("warm", pool_req(3, 4)).await.expect("put");
        assert_eq!((p.ready, p.starting, p.hits, p.misses), (0, 0, 0, 0));
        settled(&h, "warm", 3).await;
        assert_eq!(on_node(&h), 3);
        // Another pass changes nothing.
        settled(&h, "warm", 3).await;
        assert_eq!(on_node(&h), 3);
        assert!(listed(&h).await.is_empty(), "members are not listed");

        h.cp.put_pool("warm", pool_req(4, 4)).await.expect("grow");
        settled(&h, "warm", 4).await;
        h.cp.put_pool("warm", pool_req(2, 2)).await.expect("shrink");
        settled(&h, "warm", 2).await;
        eventually("extras deleted from the node", || async {
            on_node(&h) == 2
        })
        .await;

        // Members still booting count toward max.
        h.node.inject(Call::Start, Fault::hang().always());
        h.cp.put_pool("slow", pool_req(2, 3))
            .await
            .expect("put slow");
        h.cp.reconcile_pools().await.expect("pass");
        h.cp.reconcile_pools().await.expect("pass again");
        let slow = pool(&h, "slow").await;
        assert_eq!((slow.ready, slow.starting), (0, 2));
        h.node.wait_for_calls(Call::Start, 2 + 4).await;

        for (bad, req) in [
            ("Bad_Name", pool_req(1, 1)),
            ("ok", pool_req(2, 1)),
            ("ok", pool_req(0, 0)),
            ("ok", pool_req(1, 257)),
        ] {
            assert_eq!(
                code(h.cp.put_pool(bad, req).await),
                ErrorCode::InvalidArgument
            );
        }
        let unknown = PutPoolRequest {
            template: "nope".into(),
            ..pool_req(1, 1)
        };
        assert_eq!(
            code(h.cp.put_pool("ok", unknown).await),
            ErrorCode::TemplateNotFound
        );
        let unbuilt = PutPoolRequest {
            release: Some(9),
            ..pool_req(1, 1)
        };
        assert_eq!(
            code(h.cp.put_pool("ok", unbuilt).await),
            ErrorCode::ReleaseNotFound
        );
        assert_eq!(code(h.cp.get_pool("ok").await), ErrorCode::PoolNotFound);
    })
    .await;
}

#[tokio::test]
async fn a_matching_create_is_served_running_with_its_own_settings_and_the_pool_refills() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let member = h.node.sandbox_ids()[0].clone();
        let controller = Controller::start(h.cp.clone());

        let req = CreateSandboxRequest {
            env: BTreeMap::from([("GREETING".into(), "hello".into())]),
            metadata: BTreeMap::from([("owner".into(), "me".into())]),
            cwd: Some("/tmp".into()),
            user: Some("root".into()),
            idle_timeout_s: Some(60),
            ttl_s: Some(600),
            ..Default::default()
        };
        let r = h.cp.create_sandbox(req, None).await.expect("create");
        assert_eq!(r.sandbox.id, member, "the ready member was claimed");
        assert_eq!(r.sandbox.state, SandboxState::Running);
        assert_eq!(r.operation.state, OperationState::Succeeded);
        assert_eq!(
            r.sandbox.env.get("GREETING").map(String::as_str),
            Some("hello")
        );
        assert_eq!(
            r.sandbox.metadata.get("owner").map(String::as_str),
            Some("me")
        );
        assert_eq!(r.sandbox.cwd, "/tmp");
        assert_eq!(r.sandbox.user, "root");
        assert_eq!((r.sandbox.idle_timeout_s, r.sandbox.ttl_s), (60, Some(600)));
        assert_eq!(h.sandbox(&member).await, r.sandbox);
        assert_eq!(listed(&h).await, vec![member.clone()]);
        let spawned =
            h.cp.create_command(
                &member,
                cove_api_types::CreateCommandRequest {
                    argv: Some(vec!["true".into()]),
                    ..Default::default()
                },
            )
            .await
            .expect("a command runs at once");
        assert_eq!(spawned.command.sandbox_id, member);
        assert_eq!(
            h.node.count_on(Call::Start, &member),
            1,
            "booted once, as a member"
        );

        // The controller, woken by the claim, refills once claims pause for 100 ms (not at
        // its interval).
        h.advance(std::time::Duration::from_millis(100)).await;
        eventually("the pool refilled", || async {
            pool(&h, "warm").await.ready == 1
        })
        .await;
        let p = pool(&h, "warm").await;
        assert_eq!((p.hits, p.misses), (1, 0));
        assert_eq!(on_node(&h), 2);
        controller.stop().await;
    })
    .await;
}

#[tokio::test]
async fn concurrent_creates_never_share_a_member() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(5, 5)).await.expect("put");
        settled(&h, "warm", 5).await;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let cp = h.cp.clone();
            tasks.push(tokio::spawn(as_system(async move {
                cp.create_sandbox(CreateSandboxRequest::default(), None)
                    .await
            })));
        }
        let mut served = Vec::new();
        let mut cold = Vec::new();
        for t in tasks {
            let r = t.await.expect("join").expect("create");
            match r.sandbox.state {
                SandboxState::Running => served.push(r.sandbox.id),
                SandboxState::Creating => cold.push(r.operation),
                other => panic!("unexpected state {other:?}"),
            }
        }
        assert_eq!(served.len(), 5, "every member served once");
        assert_eq!(served.iter().collect::<HashSet<_>>().len(), 5);
        for op in &cold {
            h.succeeds(op).await;
        }
        let p = pool(&h, "warm").await;
        assert_eq!((p.hits, p.misses), (5, 3));
    })
    .await;
}

#[tokio::test]
async fn a_create_that_does_not_match_or_finds_the_pool_empty_cold_starts() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(1, 1)).await.expect("put");
        settled(&h, "warm", 1).await;
        let bigger = CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                memory_mib: Some(1024),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (s, op) = h.create_with(bigger).await;
        assert_eq!(
            s.state,
            SandboxState::Creating,
            "another size is not served"
        );
        h.succeeds(&op).await;
        assert_eq!(
            pool(&h, "warm").await.misses,
            0,
            "a create of another size is no miss"
        );
        assert_eq!(pool(&h, "warm").await.ready, 1);

        let (first, _) = h.create_with(Default::default()).await;
        assert_eq!(first.state, SandboxState::Running);
        // Empty until the controller refills: the next one cold-starts and counts a miss.
        h.node.inject(Call::Start, Fault::hang().always());
        let (second, _) = h.create_with(Default::default()).await;
        assert_eq!(second.state, SandboxState::Creating);
        let p = pool(&h, "warm").await;
        assert_eq!((p.hits, p.misses), (1, 1));
    })
    .await;
}

/// A create with an egress policy takes a ready member and gets its policy there (record and
/// gateway) before it answers.
#[tokio::test]
async fn a_create_with_a_policy_is_served_warm_with_the_policy_on_the_member() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let strict =
            cove_api_types::EgressPolicy::parse(false, &["pypi.org"], &[]).expect("policy");
        let (s, _) = h
            .create_with(CreateSandboxRequest {
                network: Some(strict.clone()),
                ..Default::default()
            })
            .await;
        assert_eq!(s.state, SandboxState::Running, "served by the pool");
        assert_eq!(s.network, strict);
        assert_eq!(h.sandbox(&s.id).await.network, strict, "recorded");
        assert_eq!(h.node.network_policy(&s.id), Some(strict), "on the gateway");
        assert_eq!(pool(&h, "warm").await.hits, 1);
    })
    .await;
}

#[tokio::test]
async fn a_new_release_retires_old_members_of_a_pool_that_follows_the_latest() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("latest", pool_req(2, 2)).await.expect("put");
        let pinned = PutPoolRequest {
            release: Some(1),
            ..pool_req(1, 1)
        };
        h.cp.put_pool("pinned", pinned).await.expect("put pinned");
        settled(&h, "latest", 2).await;
        settled(&h, "pinned", 1).await;
        let old: Vec<String> = h.node.sandbox_ids();

        let built =
            h.cp.build_release("base", Default::default())
                .await
                .expect("build");
        h.succeeds(&built.operation).await;
        settled(&h, "latest", 2).await;
        settled(&h, "pinned", 1).await;
        let members = h.cp.store().pool_members().await.expect("members");
        let live: Vec<_> = members
            .iter()
            .filter(|m| m.sandbox.state == SandboxState::Running)
            .collect();
        assert_eq!(live.len(), 3);
        for m in live {
            let want = if m.pool == "pinned" { 1 } else { 2 };
            assert_eq!(m.sandbox.release, want, "{m:?}");
        }
        let retired: Vec<&String> = old
            .iter()
            .filter(|id| {
                members
                    .iter()
                    .any(|m| &m.sandbox.id == *id && m.pool == "latest")
            })
            .collect();
        for id in retired {
            eventually("an old member deleted", || async {
                h.state(id).await == SandboxState::Deleted
            })
            .await;
        }
        // A create without a release gets the latest: served by `latest`.
        let (s, _) = h.create_with(Default::default()).await;
        assert_eq!((s.state, s.release), (SandboxState::Running, 2));
        let one = CreateSandboxRequest {
            release: Some(1),
            ..Default::default()
        };
        let (s, _) = h.create_with(one).await;
        assert_eq!(
            (s.state, s.release),
            (SandboxState::Running, 1),
            "served by `pinned`"
        );
    })
    .await;
}

#[tokio::test]
async fn members_survive_a_restart_and_lost_ones_are_replaced() {
    as_system(async {
        let mut h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(2, 2)).await.expect("put");
        settled(&h, "warm", 2).await;
        let members = h.node.sandbox_ids();
        h.node.lose(&members[0]);

        h.restart();
        h.cp.reconcile().await.expect("reconcile");
        assert_eq!(h.state(&members[0]).await, SandboxState::Failed);
        assert_eq!(h.state(&members[1]).await, SandboxState::Running, "adopted");
        settled(&h, "warm", 2).await;
        eventually("the lost member deleted", || async {
            h.state(&members[0]).await == SandboxState::Deleted
        })
        .await;
        let (s, _) = h.create_with(Default::default()).await;
        assert_eq!(s.state, SandboxState::Running);
        assert!(listed(&h).await.contains(&s.id));
    })
    .await;
}

#[tokio::test]
async fn deleting_a_pool_drains_it() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(2, 3)).await.expect("put");
        settled(&h, "warm", 2).await;
        let ready = h.node.sandbox_ids();
        // One more member still booting when the pool goes.
        h.node.inject(Call::Start, Fault::hang());
        h.cp.put_pool("warm", pool_req(3, 3)).await.expect("grow");
        h.cp.reconcile_pools().await.expect("pass");
        h.node.wait_for_calls(Call::Start, 3).await;

        h.cp.delete_pool("warm").await.expect("delete");
        assert_eq!(code(h.cp.get_pool("warm").await), ErrorCode::PoolNotFound);
        assert_eq!(
            code(h.cp.delete_pool("warm").await),
            ErrorCode::PoolNotFound
        );
        h.node.release(Call::Start);
        for id in &ready {
            eventually("a drained member deleted", || async {
                h.state(id).await == SandboxState::Deleted
            })
            .await;
        }
        eventually("the booting member deleted too", || async {
            h.cp.store()
                .pool_members()
                .await
                .expect("members")
                .is_empty()
        })
        .await;
        h.cp.reconcile_pools().await.expect("pass");
        eventually("nothing left on the node", || async { on_node(&h) == 0 }).await;
        assert!(h.cp.list_pools().await.expect("list").pools.is_empty());
    })
    .await;
}

async fn with_key() -> Harness {
    Harness::with(cove_test_support::FakeNode::new(), |cfg| {
        cfg.secrets_key =
            Some(cove_control_plane::network::SecretsKey::new(&[7u8; 32]).expect("key"));
    })
    .await
}

fn with_secret(value: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        secrets: BTreeMap::from([(
            "API_KEY".to_string(),
            cove_api_types::SecretRequest {
                value: value.into(),
                hosts: vec!["api.test".parse().expect("host")],
            },
        )]),
        ..Default::default()
    }
}

/// A create with secrets takes a ready member (booted trusting its gateway CA) and hands the
/// secrets to its gateway before it answers: recorded (sealed) and on the node as on a cold
/// start, and again on a wake.
#[tokio::test]
async fn a_create_with_secrets_is_served_warm_with_the_secrets_on_the_member() {
    as_system(async {
        let h = with_key().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let member = h.node.sandbox_ids()[0].clone();
        let booted = h.node.launch_of(&member).expect("launch");
        assert!(
            booted.arm_secrets && booted.secrets.is_empty(),
            "armed, no secrets"
        );

        let (s, op) = h.create_with(with_secret("sk-pooled")).await;
        assert_eq!(s.id, member, "the ready member was claimed");
        assert_eq!(s.state, SandboxState::Running);
        assert_eq!(op.state, OperationState::Succeeded);
        assert_eq!(s.secrets["API_KEY"].hosts[0].to_string(), "api.test");
        assert_eq!(h.sandbox(&s.id).await.secrets, s.secrets, "recorded");
        let sealed =
            h.cp.store()
                .sealed_secrets(&s.id)
                .await
                .expect("sealed")
                .expect("stored");
        assert!(sealed.starts_with("v1:") && !sealed.contains("sk-pooled"));
        assert_eq!(
            h.node.launch_of(&s.id).expect("launch").secrets["API_KEY"].value,
            "sk-pooled",
            "on the gateway"
        );
        assert_eq!(pool(&h, "warm").await.hits, 1);

        // The sealed values open for a wake, as a cold sandbox's do.
        h.apply(&s.id, cove_control_plane::LifecycleVerb::Suspend)
            .await;
        h.apply(&s.id, cove_control_plane::LifecycleVerb::Wake)
            .await;
        assert_eq!(
            h.node.launch_of(&s.id).expect("launch").secrets["API_KEY"].value,
            "sk-pooled"
        );
    })
    .await;
}

/// A member whose gateway refuses the secrets is deleted, never handed out without them, and
/// the pool boots another.
#[tokio::test]
async fn a_claimed_member_that_cannot_take_the_secrets_is_deleted() {
    as_system(async {
        let h = with_key().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let member = h.node.sandbox_ids()[0].clone();
        h.node.inject(
            Call::RearmSecrets,
            Fault::fail(cove_node_api::NodeError::Runtime("gateway gone".into())),
        );
        assert!(
            h.cp.create_sandbox(with_secret("sk-x"), None)
                .await
                .is_err(),
            "the create fails rather than serve without its secrets"
        );
        eventually("the member deleted", || async {
            h.state(&member).await == SandboxState::Deleted
        })
        .await;
        assert!(!listed(&h).await.contains(&member));
        settled(&h, "warm", 1).await;
        assert_ne!(h.node.sandbox_ids(), vec![member]);
    })
    .await;
}

fn mounting_data() -> CreateSandboxRequest {
    CreateSandboxRequest {
        volumes: vec![cove_api_types::VolumeMount {
            name: "data".into(),
            path: "/data".into(),
            read_only: false,
        }],
        ..Default::default()
    }
}

async fn data_volume(h: &Harness) {
    h.cp.create_volume(cove_api_types::CreateVolumeRequest {
        name: "data".into(),
        size_mib: 64,
        storage: Default::default(),
    })
    .await
    .expect("volume");
}

/// A create that mounts a volume takes a ready member on a node that attaches volumes to a
/// running sandbox: recorded (so the volume is in use until the sandbox goes) and attached on
/// the node before the create answers.
#[tokio::test]
async fn a_create_with_volumes_is_served_warm_with_the_volumes_attached() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let member = h.node.sandbox_ids()[0].clone();
        data_volume(&h).await;
        let (s, op) = h.create_with(mounting_data()).await;
        assert_eq!(s.id, member, "the ready member was claimed");
        assert_eq!(
            (s.state, op.state),
            (SandboxState::Running, OperationState::Succeeded)
        );
        assert_eq!(s.volumes, mounting_data().volumes);
        assert_eq!(h.sandbox(&s.id).await.volumes, s.volumes, "recorded");
        let on_node = h.node.launch_of(&s.id).expect("launch").volumes;
        assert_eq!(on_node.len(), 1);
        assert_eq!(on_node[0].path, "/data");
        assert_eq!(
            h.node.volume_ids(),
            vec![on_node[0].id.clone()],
            "the volume's id"
        );
        assert_eq!(
            code(h.cp.delete_volume("data").await),
            ErrorCode::VolumeInUse,
            "mounted by the claimed member"
        );
        // A wake mounts them at start, as a cold sandbox's.
        h.apply(&s.id, cove_control_plane::LifecycleVerb::Suspend)
            .await;
        h.apply(&s.id, cove_control_plane::LifecycleVerb::Wake)
            .await;
        assert_eq!(h.node.launch_of(&s.id).expect("launch").volumes, on_node);
        let op = h.cp.delete_sandbox(&s.id, None).await.expect("delete");
        h.succeeds(&op).await;
        h.cp.delete_volume("data").await.expect("free again");
    })
    .await;
}

/// A member the node cannot give the volumes is deleted, never handed out without them.
#[tokio::test]
async fn a_claimed_member_that_cannot_take_the_volumes_is_deleted() {
    as_system(async {
        let h = Harness::new().await;
        h.cp.put_pool("warm", pool_req(1, 2)).await.expect("put");
        settled(&h, "warm", 1).await;
        let member = h.node.sandbox_ids()[0].clone();
        data_volume(&h).await;
        h.node.inject(
            Call::AttachVolumes,
            Fault::fail(cove_node_api::NodeError::Runtime(
                "volume path /data: a symbolic link is on the way".into(),
            )),
        );
        assert!(h.cp.create_sandbox(mounting_data(), None).await.is_err());
        eventually("the member deleted", || async {
            h.state(&member).await == SandboxState::Deleted
        })
        .await;
        h.cp.delete_volume("data")
            .await
            .expect("not in use once deleted");
    })
    .await;
}

/// Where the node cannot attach volumes to a running sandbox (gVisor, VMs), a create with
/// volumes cold-starts (miss reason `volumes`) and the member stays ready.
#[tokio::test]
async fn a_node_that_cannot_attach_volumes_cold_starts_creates_with_them() {
    use cove_node_api::NodeLifecycle as _;
    as_system(async {
        let node =
            cove_test_support::FakeNode::with_capabilities(cove_node_api::NodeCapabilities {
                attach_volumes: false,
                ..cove_test_support::FakeNode::new().capabilities()
            });
        let h = Harness::with(node, |_| {}).await;
        h.cp.put_pool("warm", pool_req(1, 1)).await.expect("put");
        settled(&h, "warm", 1).await;
        data_volume(&h).await;
        let (s, op) = h.create_with(mounting_data()).await;
        assert_eq!(s.state, SandboxState::Creating, "a cold start");
        h.succeeds(&op).await;
        assert_eq!(pool(&h, "warm").await.ready, 1, "the member stays ready");
        assert!(!h.node.launch_of(&s.id).expect("launch").arm_secrets);
    })
    .await;
}
