//! Orgs: another org's resources are not found on every route family (service calls made as
//! an org's caller), keys are made once per call and orgs validated. The same over HTTP with
//! real keys (hashed keys, revocation, quotas' 429, the audit log) is `cove-http`'s
//! `tests/orgs.rs`.

use cove_api_types::{
    CreateApiKeyRequest, CreateCheckpointRequest, CreateCommandRequest, CreateOrgRequest,
    ErrorCode, LifecycleRequest, PutPoolRequest,
};
use cove_control_plane::orgs::{scope, Actor, Caller};
use cove_control_plane::ports::PortCredentials;
use cove_control_plane::{LifecycleVerb, ListOptions, ReadOptions, SandboxPath};

use crate::harness::{as_org, as_system};
use crate::harness::{code, Harness};

async fn with_orgs() -> Harness {
    let h = Harness::new().await;
    for id in ["a", "b"] {
        h.cp.create_org(CreateOrgRequest {
            id: id.into(),
            ..Default::default()
        })
        .await
        .expect("org");
    }
    h
}

/// A running sandbox of `org`.
async fn running_of(h: &Harness, org: &str) -> String {
    let r = as_org(org, h.cp.create_sandbox(Default::default(), None))
        .await
        .expect("create");
    h.succeeds(&r.operation).await;
    assert_eq!(h.sandbox(&r.sandbox.id).await.org, org);
    r.sandbox.id
}

#[tokio::test]
async fn every_route_family_hides_another_orgs_resources() {
    as_system(async {
        let h = with_orgs().await;
        let a = running_of(&h, "a").await;
        let nf = ErrorCode::SandboxNotFound;
        let cp = &h.cp;

        // Sandboxes: get, list, lifecycle, network, ports, metrics, delete.
        assert_eq!(code(as_org("b", cp.get_sandbox(&a)).await), nf);
        let listed = as_org("b", cp.list_sandboxes(None, None, vec![], Some(100), None))
            .await
            .expect("list");
        assert!(listed.sandboxes.is_empty(), "{listed:?}");
        let own = as_org("a", cp.list_sandboxes(None, None, vec![], Some(100), None))
            .await
            .expect("list");
        assert_eq!(own.sandboxes.len(), 1);
        let pause = cp.lifecycle(&a, LifecycleVerb::Pause, LifecycleRequest::default(), None);
        assert_eq!(code(as_org("b", pause).await), nf);
        assert_eq!(code(as_org("b", cp.sandbox_network(&a)).await), nf);
        assert_eq!(code(as_org("b", cp.delete_sandbox(&a, None)).await), nf);
        assert_eq!(
            code(as_org("b", cp.authorize_port(&a, 80, PortCredentials::default())).await),
            nf
        );

        // Commands and files.
        let argv = CreateCommandRequest {
            argv: Some(vec!["true".into()]),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", cp.create_command(&a, argv.clone())).await),
            nf
        );
        let started = as_org("a", cp.create_command(&a, argv)).await.expect("cmd");
        let cid = started.command.id.clone();
        assert_eq!(code(as_org("b", cp.list_commands(&a, None)).await), nf);
        assert_eq!(code(as_org("b", cp.get_command(&a, &cid, None)).await), nf);
        assert_eq!(code(as_org("b", cp.new_attachment(&a, &cid)).await), nf);
        let root = SandboxPath(b"/".to_vec());
        let list = cp.list_files(&a, root, None, ListOptions::default());
        assert_eq!(code(as_org("b", list).await), nf);
        let read = cp.read_file(
            &a,
            SandboxPath(b"/etc/hostname".to_vec()),
            None,
            ReadOptions::default(),
        );
        assert_eq!(as_org("b", read).await.err().map(|e| e.code()), Some(nf));

        // Operations: get, wait, cancel, logs, list.
        let op = as_org(
            "a",
            cp.lifecycle(&a, LifecycleVerb::Pause, Default::default(), None),
        )
        .await
        .expect("pause");
        h.succeeds(&op).await;
        let ops = cp.operations();
        assert_eq!(
            code(as_org("b", ops.get(&op.id)).await),
            ErrorCode::OperationNotFound
        );
        assert_eq!(
            code(as_org("b", ops.cancel(&op.id)).await),
            ErrorCode::OperationNotFound
        );
        assert_eq!(
            code(as_org("b", ops.logs(&op.id, 0)).await),
            ErrorCode::OperationNotFound
        );
        assert!(as_org("b", ops.list(None, None))
            .await
            .expect("ops")
            .is_empty());
        assert!(!as_org("a", ops.list(None, None))
            .await
            .expect("ops")
            .is_empty());
        h.apply(&a, LifecycleVerb::Resume).await;

        // Checkpoints.
        let ck = as_org(
            "a",
            cp.create_checkpoint(&a, CreateCheckpointRequest::default(), None),
        )
        .await
        .expect("checkpoint");
        h.succeeds(&ck.operation).await;
        let ckid = ck.checkpoint.id.clone();
        assert_eq!(
            code(as_org("b", cp.get_checkpoint(&ckid)).await),
            ErrorCode::CheckpointNotFound
        );
        assert_eq!(
            code(as_org("b", cp.delete_checkpoint(&ckid)).await),
            ErrorCode::CheckpointNotFound
        );
        assert!(as_org("b", cp.list_checkpoints(None))
            .await
            .expect("list")
            .checkpoints
            .is_empty());
        assert_eq!(code(as_org("b", cp.list_checkpoints(Some(&a))).await), nf);
        let from_ck = cove_api_types::CreateSandboxRequest {
            checkpoint: Some(ckid.clone()),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", cp.create_sandbox(from_ck, None)).await),
            ErrorCode::CheckpointNotFound
        );
        assert_eq!(
            as_org("a", cp.get_checkpoint(&ckid))
                .await
                .expect("own")
                .org,
            "a"
        );

        // Pools: names are shared, pools are not.
        let pool = PutPoolRequest {
            template: "base".into(),
            release: None,
            resources: None,
            min_ready: 0,
            max: 1,
        };
        as_org("a", cp.put_pool("warm", pool.clone()))
            .await
            .expect("pool");
        assert_eq!(
            code(as_org("b", cp.get_pool("warm")).await),
            ErrorCode::PoolNotFound
        );
        assert_eq!(
            code(as_org("b", cp.delete_pool("warm")).await),
            ErrorCode::PoolNotFound
        );
        assert_eq!(
            code(as_org("b", cp.put_pool("warm", pool)).await),
            ErrorCode::AlreadyExists
        );
        assert!(as_org("b", cp.list_pools())
            .await
            .expect("pools")
            .pools
            .is_empty());

        // Templates: built-ins are shared (usable, not rebuildable by a key).
        let listed = as_org("b", cp.list_templates()).await.expect("templates");
        assert!(listed.templates.iter().any(|t| t.name == "base"));
        assert_eq!(
            code(as_org("b", cp.build_release("base", Default::default())).await),
            ErrorCode::Forbidden
        );

        // Org admin routes need the admin token.
        assert_eq!(
            code(as_org("b", cp.list_orgs()).await),
            ErrorCode::Forbidden
        );
        assert_eq!(
            code(as_org("b", cp.get_org("a")).await),
            ErrorCode::NotFound
        );
        assert_eq!(as_org("b", cp.get_org("b")).await.expect("own").id, "b");

        // The owner still has everything.
        assert_eq!(as_org("a", cp.get_sandbox(&a)).await.expect("own").id, a);
        // The admin token acts in the default org: it does not see org a's sandbox either.
        assert_eq!(
            code(scope::scoped(Caller::admin(), cp.get_sandbox(&a)).await),
            nf
        );
    })
    .await;
}

#[tokio::test]
async fn file_templates_belong_to_their_org() {
    as_system(async {
        let h = with_orgs().await;
        // Another org's file template is not there for b, even by name in a create.
        h.cp.store()
            .put_file_template("web", "a", "FROM base\n")
            .await
            .expect("template");
        assert_eq!(
            code(as_org("b", h.cp.get_template("web")).await),
            ErrorCode::TemplateNotFound
        );
        let req = cove_api_types::CreateSandboxRequest {
            template: Some("web".into()),
            ..Default::default()
        };
        assert_eq!(
            code(as_org("b", h.cp.create_sandbox(req, None)).await),
            ErrorCode::TemplateNotFound
        );
        assert_eq!(
            as_org("a", h.cp.get_template("web"))
                .await
                .expect("own")
                .org
                .as_deref(),
            Some("a")
        );
    })
    .await;
}

#[tokio::test]
async fn api_keys_are_created_once_per_call_and_orgs_validated() {
    as_system(async {
        let h = Harness::new().await;
        assert_eq!(
            code(
                h.cp.create_org(CreateOrgRequest {
                    id: "Bad Id".into(),
                    ..Default::default()
                })
                .await
            ),
            ErrorCode::InvalidArgument
        );
        h.cp.create_org(CreateOrgRequest {
            id: "x".into(),
            ..Default::default()
        })
        .await
        .expect("org");
        assert_eq!(
            code(
                h.cp.create_org(CreateOrgRequest {
                    id: "x".into(),
                    ..Default::default()
                })
                .await
            ),
            ErrorCode::AlreadyExists
        );
        let one =
            h.cp.create_api_key("x", CreateApiKeyRequest::default())
                .await
                .expect("key");
        let two =
            h.cp.create_api_key("x", CreateApiKeyRequest::default())
                .await
                .expect("key");
        assert_ne!(one.secret, two.secret);
        assert_eq!(
            code(
                h.cp.create_api_key("nope", CreateApiKeyRequest::default())
                    .await
            ),
            ErrorCode::NotFound
        );
        let c = h.cp.authenticate(&one.secret).await.expect("auth");
        assert_eq!(
            (c.org.as_str(), c.actor),
            ("x", Actor::Key(one.key.id.clone()))
        );
    })
    .await;
}
