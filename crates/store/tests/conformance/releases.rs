//! Release numbering and states.

use std::sync::Arc;

use cove_api_types::ReleaseState;
use cove_store::Store;

pub async fn release_numbers_count_up_per_template(store: Arc<dyn Store>) {
    let r1 = store.insert_next_release("tiny", "h1").await.expect("r1");
    assert_eq!(
        (r1.template.as_str(), r1.number, r1.state, r1.size_bytes),
        ("tiny", 1, ReleaseState::Building, None)
    );
    assert_eq!(r1.recipe_hash, "h1");
    assert_eq!(
        store
            .insert_next_release("tiny", "h2")
            .await
            .expect("r2")
            .number,
        2
    );
    assert_eq!(
        store
            .insert_next_release("base", "h")
            .await
            .expect("b1")
            .number,
        1
    );
    store
        .set_release_state("tiny", 2, ReleaseState::Failed, None)
        .await
        .expect("fail");
    assert_eq!(
        store
            .insert_next_release("tiny", "h3")
            .await
            .expect("r3")
            .number,
        3,
        "a failed release keeps its number"
    );
}

pub async fn concurrent_release_numbers_are_distinct(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .insert_next_release("tiny", &format!("h{i}"))
                    .await
                    .expect("allocate")
                    .number
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for t in tasks {
        numbers.push(t.await.expect("task"));
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=10).collect::<Vec<u32>>());
}

pub async fn release_states_and_listing(store: Arc<dyn Store>) {
    for h in ["h1", "h2", "h3"] {
        store.insert_next_release("tiny", h).await.expect("insert");
    }
    store
        .insert_next_release("base", "hb")
        .await
        .expect("insert");
    store
        .set_release_state("tiny", 1, ReleaseState::Ready, Some(5 << 30))
        .await
        .expect("ready");
    store
        .set_release_state("tiny", 2, ReleaseState::Failed, None)
        .await
        .expect("failed");
    store
        .set_release_state("tiny", 9, ReleaseState::Ready, Some(1))
        .await
        .expect("an unknown release is a no-op");
    let list = store.list_releases("tiny").await.expect("list");
    let got: Vec<(u32, ReleaseState, Option<u64>, &str)> = list
        .iter()
        .map(|r| (r.number, r.state, r.size_bytes, r.recipe_hash.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, ReleaseState::Building, None, "h3"),
            (2, ReleaseState::Failed, None, "h2"),
            (1, ReleaseState::Ready, Some(5 << 30), "h1"),
        ]
    );
    assert!(store.list_releases("none").await.expect("list").is_empty());
    let digest = format!("sha256:{}", "0f".repeat(32));
    store
        .set_release_digest("tiny", 1, &digest)
        .await
        .expect("digest");
    store
        .set_release_digest("tiny", 9, &digest)
        .await
        .expect("an unknown release is a no-op");
    let digests: Vec<Option<String>> = store
        .list_releases("tiny")
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.digest)
        .collect();
    assert_eq!(digests, [None, None, Some(digest)]);
    let mut building: Vec<(String, u32)> = store
        .building_releases()
        .await
        .expect("building")
        .into_iter()
        .map(|r| (r.template, r.number))
        .collect();
    building.sort();
    assert_eq!(building, [("base".to_string(), 1), ("tiny".to_string(), 3)]);
}
