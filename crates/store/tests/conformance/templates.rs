//! File templates and the defaults of releases built from a file.

use std::collections::BTreeMap;
use std::sync::Arc;

use cove_api_types::{ReadyCheck, ReleaseState, TemplateDefaults};
use cove_store::Store;

pub async fn file_templates_are_put_replaced_listed_and_deleted(store: Arc<dyn Store>) {
    assert_eq!(store.file_template("web").await.expect("get"), None);
    store
        .put_file_template("web", "default", "FROM base\n")
        .await
        .expect("put");
    store
        .put_file_template("api", "default", "FROM tiny\n")
        .await
        .expect("put");
    let first = store
        .file_template("web")
        .await
        .expect("get")
        .expect("there");
    assert_eq!(first.file, "FROM base\n");
    store
        .put_file_template("web", "default", "FROM base\nRUN true\n")
        .await
        .expect("replace");
    let second = store
        .file_template("web")
        .await
        .expect("get")
        .expect("there");
    assert_eq!(second.file, "FROM base\nRUN true\n");
    assert_eq!(second.created_at, first.created_at);
    assert!(second.updated_at >= first.updated_at);
    let names: Vec<String> = store
        .file_templates()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["api", "web"]);
    assert!(store.delete_file_template("web").await.expect("delete"));
    assert!(!store.delete_file_template("web").await.expect("again"));
    assert_eq!(store.file_template("web").await.expect("get"), None);
}

pub async fn release_defaults_round_trip_and_deleted_numbers_are_not_reused(store: Arc<dyn Store>) {
    let r = store.insert_next_release("web", "file").await.expect("r1");
    assert_eq!(r.defaults, None);
    let defaults = TemplateDefaults {
        user: "app".into(),
        workdir: "/srv".into(),
        env: BTreeMap::from([("MODE".to_string(), "prod".to_string())]),
        start: Some("serve".into()),
        ready: Some(ReadyCheck {
            command: "check".into(),
            timeout_s: 30,
        }),
        labels: BTreeMap::from([("title".to_string(), "web".to_string())]),
        ports: vec![8000],
    };
    store
        .set_release_defaults("web", r.number, &defaults)
        .await
        .expect("defaults");
    store
        .set_release_operation("web", r.number, "op-build")
        .await
        .expect("operation");
    store
        .set_release_state("web", r.number, ReleaseState::Deleted, None)
        .await
        .expect("delete");
    let listed = store.list_releases("web").await.expect("list");
    assert_eq!(listed[0].defaults.as_ref(), Some(&defaults));
    assert_eq!(listed[0].state, ReleaseState::Deleted);
    assert_eq!(listed[0].build_operation_id.as_deref(), Some("op-build"));
    let next = store.insert_next_release("web", "file").await.expect("r2");
    assert_eq!(next.number, 2);
}

pub async fn a_template_with_no_ready_or_building_release_is_deleted_conditionally(
    store: Arc<dyn Store>,
) {
    store
        .put_file_template("web", "default", "FROM base\n")
        .await
        .expect("put");
    let first = store.insert_next_release("web", "file").await.expect("r1");
    assert_eq!(first.state, ReleaseState::Building);
    assert!(!store
        .delete_file_template_if_unbuilt("web")
        .await
        .expect("building keeps it"));
    store
        .set_release_state("web", first.number, ReleaseState::Ready, Some(1))
        .await
        .expect("ready");
    assert!(!store
        .delete_file_template_if_unbuilt("web")
        .await
        .expect("ready keeps it"));
    store
        .set_release_state("web", first.number, ReleaseState::Failed, None)
        .await
        .expect("failed");
    // Another template's ready release does not count.
    let other = store.insert_next_release("api", "file").await.expect("api");
    store
        .set_release_state("api", other.number, ReleaseState::Ready, Some(1))
        .await
        .expect("ready");
    assert!(store
        .delete_file_template_if_unbuilt("web")
        .await
        .expect("only failed: deleted"));
    assert_eq!(store.file_template("web").await.expect("get"), None);
    assert!(!store
        .delete_file_template_if_unbuilt("web")
        .await
        .expect("already gone"));
}
