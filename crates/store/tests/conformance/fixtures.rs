//! Rows the cases insert.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use cove_api_types::{
    EgressPolicy, OperationKind, Resources, Sandbox, SandboxSecret, SandboxState,
};
use cove_store::NewOperation;

/// Now, to the microsecond: the finest time every backend keeps (PostgreSQL's).
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// A running sandbox with every optional field set.
pub fn sandbox(id: &str) -> Sandbox {
    let t = now();
    Sandbox {
        id: id.into(),
        org: "default".into(),
        template: "tiny".into(),
        release: 3,
        release_digest: Some(format!("sha256:{}", "ab".repeat(32))),
        state: SandboxState::Running,
        state_reason: None,
        runtime: "runc".into(),
        resources: Resources {
            vcpus: 2,
            memory_mib: 512,
            pids_max: 256,
            disk_mib: Some(1024),
        },
        env: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "two words".into())]),
        metadata: BTreeMap::from([("owner".into(), "conformance".into())]),
        cwd: "/work".into(),
        user: "user".into(),
        created_at: t,
        updated_at: t,
        idle_timeout_s: 2,
        ttl_s: Some(60),
        expires_at: Some(t + chrono::Duration::seconds(60)),
        on_expiry: cove_api_types::OnExpiry::Suspend,
        last_activity_at: Some(t),
        memory_restored: Some(true),
        network: EgressPolicy::parse(
            false,
            &["pypi.org", "*.pythonhosted.org", "203.0.113.0/24"],
            &["203.0.113.7"],
        )
        .expect("policy"),
        secrets: BTreeMap::from([(
            "API_KEY".into(),
            SandboxSecret {
                hosts: vec!["api.example.com".parse().expect("host")],
            },
        )]),
        public: true,
        volumes: vec![
            cove_api_types::VolumeMount {
                name: "data".into(),
                path: "/data".into(),
                read_only: false,
            },
            cove_api_types::VolumeMount {
                name: "models".into(),
                path: "/home/user/models".into(),
                read_only: true,
            },
        ],
    }
}

/// A sandbox with every optional field empty.
pub fn bare_sandbox(id: &str) -> Sandbox {
    Sandbox {
        state_reason: None,
        resources: Resources {
            disk_mib: None,
            ..Resources::default()
        },
        env: BTreeMap::new(),
        metadata: BTreeMap::new(),
        ttl_s: None,
        expires_at: None,
        on_expiry: cove_api_types::OnExpiry::Delete,
        last_activity_at: None,
        memory_restored: None,
        network: EgressPolicy::default(),
        secrets: BTreeMap::new(),
        public: false,
        volumes: Vec::new(),
        ..sandbox(id)
    }
}

/// A sandbox op without an idempotency key.
pub fn operation(id: &str, kind: OperationKind, sandbox: &str) -> NewOperation {
    NewOperation {
        org: "default".into(),
        id: id.into(),
        kind,
        sandbox_id: Some(sandbox.into()),
        template: None,
        release: None,
        idempotency_key: None,
        request_hash: None,
        deadline: now() + chrono::Duration::minutes(30),
    }
}

/// A short pause, so rows written around it have distinct times.
pub async fn tick() {
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
}
