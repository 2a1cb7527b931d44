//! Volume rows, and which live sandboxes mount a volume.

use std::sync::Arc;

use cove_api_types::{SandboxState, VolumeMount};
use cove_store::{Store, StoreError, VolumeObject, VolumeRecord};

use crate::fixtures::{bare_sandbox, now};

fn record(id: &str, org: &str, name: &str) -> VolumeRecord {
    VolumeRecord {
        id: id.into(),
        org: org.into(),
        name: name.into(),
        size_mib: 1 << 20,
        created_at: now(),
        node: None,
        object: None,
    }
}

pub async fn volumes_round_trip_and_names_are_unique_per_org(store: Arc<dyn Store>) {
    let v = record("vol-1", "default", "data");
    store.insert_volume(&v).await.expect("insert");
    assert_eq!(store.get_volume("default", "data").await.expect("get"), v);
    // The node that keeps it is kept too (none: the server's own node).
    let on_node = VolumeRecord {
        node: Some("node-7".into()),
        ..record("vol-5", "default", "logs")
    };
    store.insert_volume(&on_node).await.expect("insert");
    assert_eq!(
        store.get_volume("default", "logs").await.expect("get"),
        on_node
    );
    assert!(store
        .delete_volume("default", "logs")
        .await
        .expect("delete"));
    assert!(matches!(
        store
            .insert_volume(&record("vol-2", "default", "data"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    store
        .insert_volume(&record("vol-3", "acme", "data"))
        .await
        .expect("same name, other org");
    store
        .insert_volume(&record("vol-4", "default", "cache"))
        .await
        .expect("other name");
    assert!(matches!(
        store.get_volume("nobody", "data").await,
        Err(StoreError::NotFound)
    ));
    let names = |vs: Vec<VolumeRecord>| {
        vs.into_iter()
            .map(|v| format!("{}/{}", v.org, v.name))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.list_volumes(Some("default")).await.expect("list")),
        ["default/cache", "default/data"]
    );
    assert_eq!(
        names(store.list_volumes(None).await.expect("list all")),
        ["acme/data", "default/cache", "default/data"]
    );
    assert!(store
        .delete_volume("default", "data")
        .await
        .expect("delete"));
    assert!(!store.delete_volume("default", "data").await.expect("again"));
    assert_eq!(
        store.get_volume("acme", "data").await.expect("kept").id,
        "vol-3"
    );
}

pub async fn volume_users_are_the_live_sandboxes_that_mount_it(store: Arc<dyn Store>) {
    let mounting = |id: &str, org: &str, names: &[&str]| {
        let mut s = bare_sandbox(id);
        s.org = org.into();
        s.volumes = names
            .iter()
            .enumerate()
            .map(|(i, n)| VolumeMount {
                name: (*n).into(),
                path: format!("/v{i}"),
                read_only: i > 0,
            })
            .collect();
        s
    };
    for s in [
        mounting("sb-a", "default", &["data"]),
        mounting("sb-b", "default", &["cache", "data"]),
        mounting("sb-c", "default", &["cache"]),
        mounting("sb-d", "acme", &["data"]),
        mounting("sb-e", "default", &["data"]),
    ] {
        store.insert_sandbox(&s).await.expect("insert");
        crate::fixtures::tick().await;
    }
    let b = store.get_sandbox("sb-b").await.expect("get");
    assert_eq!(
        b.volumes,
        mounting("sb-b", "default", &["cache", "data"]).volumes
    );
    let from = [store.get_sandbox("sb-e").await.expect("get").state];
    assert!(store
        .transition_sandbox("sb-e", &from, SandboxState::Deleted, None)
        .await
        .expect("delete"));
    assert_eq!(
        store.volume_users("default", "data").await.expect("users"),
        ["sb-a", "sb-b"]
    );
    assert_eq!(
        store.volume_users("acme", "data").await.expect("users"),
        ["sb-d"]
    );
    assert_eq!(
        store.volume_users("default", "cache").await.expect("users"),
        ["sb-b", "sb-c"]
    );
    assert!(store
        .volume_users("default", "none")
        .await
        .expect("users")
        .is_empty());
}

pub async fn object_volumes_attach_detach_and_flip_generations(store: Arc<dyn Store>) {
    let v = VolumeRecord {
        node: Some("node-a".into()),
        object: Some(VolumeObject {
            generation: 0,
            attached: true,
        }),
        ..record("vol-o1", "default", "shared")
    };
    store.insert_volume(&v).await.expect("insert");
    assert_eq!(store.get_volume("default", "shared").await.expect("get"), v);
    // An upload flips the generation once and detaches it.
    store
        .set_volume_attachment("vol-o1", 0, 1, None)
        .await
        .expect("detach at 1");
    let got = store.get_volume("default", "shared").await.expect("get");
    assert_eq!(got.node, None);
    assert_eq!(
        got.object,
        Some(VolumeObject {
            generation: 1,
            attached: false
        })
    );
    // A stale flip is refused and changes nothing.
    assert!(matches!(
        store
            .set_volume_attachment("vol-o1", 0, 2, Some(Some("node-b")))
            .await,
        Err(StoreError::Conflict(_))
    ));
    // Attached to the server's own node (no name), then to a named node.
    store
        .set_volume_attachment("vol-o1", 1, 1, Some(None))
        .await
        .expect("attach here");
    let got = store.get_volume("default", "shared").await.expect("get");
    assert_eq!(
        (got.node, got.object.map(|o| o.attached)),
        (None, Some(true))
    );
    store
        .set_volume_attachment("vol-o1", 1, 1, Some(Some("node-b")))
        .await
        .expect("attach on b");
    // A local volume is not an object volume.
    store
        .insert_volume(&VolumeRecord {
            node: Some("node-b".into()),
            ..record("vol-l1", "default", "local")
        })
        .await
        .expect("insert local");
    assert!(matches!(
        store.set_volume_attachment("vol-l1", 0, 1, None).await,
        Err(StoreError::NotFound)
    ));
    // Node b is lost: its object volumes detach, its local ones stay.
    assert_eq!(
        store.detach_node_volumes("node-b").await.expect("detach"),
        1
    );
    let got = store.get_volume("default", "shared").await.expect("get");
    assert_eq!(got.node, None);
    assert_eq!(
        got.object,
        Some(VolumeObject {
            generation: 1,
            attached: false
        })
    );
    assert_eq!(
        store
            .get_volume("default", "local")
            .await
            .expect("get")
            .node
            .as_deref(),
        Some("node-b")
    );
}
