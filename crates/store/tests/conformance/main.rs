//! The store conformance suite: every behaviour of the `Store` trait, run once per backend.
//!
//! Each case is an `async fn(Arc<dyn Store>)` on a fresh, empty store. [`conformance!`]
//! instantiates every case twice: `sqlite::<case>` on a temporary SQLite file and
//! `postgres::<case>` in a schema of its own in the database at `COVE_TEST_POSTGRES_URL`
//! (created before the case, dropped after it). Without that variable the PostgreSQL cases
//! fail under CI (`CI` set) and are skipped with a printed reason elsewhere.

mod backends;
mod checkpoints;
mod cluster;
mod commands;
mod events;
mod expiry;
mod fixtures;
mod lifecycle;
mod locks;
mod operations;
mod orgs;
mod pools;
mod releases;
mod sandboxes;
mod templates;
mod tokens;
mod volumes;

/// One `#[tokio::test]` per case and backend.
macro_rules! conformance {
    ($($module:ident :: $case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::backends::with_sqlite(crate::$module::$case).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::backends::with_postgres(stringify!($case), crate::$module::$case)
                        .await;
                }
            )*
        }
    };
}

conformance!(
    templates::file_templates_are_put_replaced_listed_and_deleted,
    templates::release_defaults_round_trip_and_deleted_numbers_are_not_reused,
    templates::a_template_with_no_ready_or_building_release_is_deleted_conditionally,
    sandboxes::sandboxes_round_trip,
    sandboxes::sandbox_ids_are_unique,
    sandboxes::sandbox_transitions_are_compare_and_set,
    sandboxes::listing_filters_and_orders_newest_first,
    sandboxes::listing_filters_by_org_and_metadata,
    sandboxes::cursor_paging_visits_every_row_once,
    sandboxes::sandboxes_in_returns_the_asked_states,
    sandboxes::network_policy_is_replaced_and_secrets_stay_sealed,
    expiry::expiry_is_set_extended_and_cleared,
    expiry::expired_sandboxes_are_listed_earliest_first,
    expiry::one_of_racing_claims_wins_and_a_moved_expiry_is_not_claimed,
    lifecycle::transitions_record_events_and_remember_the_state_left,
    lifecycle::a_transition_that_does_not_happen_records_nothing,
    lifecycle::activity_only_moves_forward,
    lifecycle::memory_restored_is_recorded,
    events::event_seqs_are_gap_free_and_never_reused,
    events::concurrent_writers_never_let_a_reader_skip_an_event,
    events::events_after_pages_by_seq,
    events::network_denials_carry_their_destination,
    events::purge_keeps_unfinished_operations_and_newer_rows,
    operations::operations_round_trip,
    operations::idempotency_keys_are_unique_per_kind,
    operations::final_states_do_not_change,
    operations::operations_are_listed_newest_first,
    operations::unfinished_operations_are_found,
    operations::log_lines_are_numbered_per_operation,
    operations::concurrent_log_appends_get_distinct_seqs,
    commands::commands_round_trip,
    commands::attachment_tokens_are_replaced,
    commands::commands_are_deleted_one_or_per_sandbox,
    commands::idempotency_keys_are_unique_per_sandbox,
    commands::a_guest_restart_keeps_only_keyed_commands_as_markers,
    releases::release_numbers_count_up_per_template,
    releases::concurrent_release_numbers_are_distinct,
    releases::release_states_and_listing,
    tokens::token_hashes_are_stored_and_counted,
    pools::pools_round_trip_and_put_keeps_counters,
    pools::members_are_hidden_until_claimed,
    pools::only_running_members_are_claimed,
    pools::concurrent_claims_never_share_a_member,
    pools::retiring_is_compare_and_set_against_claims,
    pools::a_claim_with_a_taken_idempotency_key_claims_nothing,
    checkpoints::checkpoints_round_trip_and_move_from_creating_only,
    checkpoints::checkpoints_are_listed_per_sandbox_newest_first,
    checkpoints::unfinished_checkpoints_are_failed,
    orgs::orgs_round_trip_and_the_default_org_exists,
    orgs::api_keys_are_found_by_hash_listed_and_revoked,
    orgs::usage_counts_sandboxes_pool_members_disks_volumes_and_snapshots,
    locks::a_named_lock_is_held_until_dropped_and_other_keys_are_free,
    orgs::listings_are_scoped_to_an_org,
    orgs::audit_records_are_paged_scoped_and_purged,
    orgs::concurrent_audit_records_are_each_stored_once,
    volumes::volumes_round_trip_and_names_are_unique_per_org,
    volumes::object_volumes_attach_detach_and_flip_generations,
    volumes::volume_users_are_the_live_sandboxes_that_mount_it,
    cluster::nodes_join_heartbeat_and_keep_an_operators_state,
    cluster::placements_are_put_moved_and_deleted,
    cluster::the_first_node_link_identity_wins,
    cluster::leases_are_held_and_expired_ones_claimed_once,
    cluster::one_leader_at_a_time,
);

/// `open` picks the backend from the URL.
#[tokio::test]
async fn open_picks_the_backend_from_the_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store = cove_store::open(&url).await.expect("open sqlite");
    assert_eq!(store.backend(), "sqlite");
    assert_eq!(store.token_count().await.expect("count"), 0);
    store.close().await;
    for bad in ["mysql://x/y", "sqlite://", "store.db"] {
        assert!(
            matches!(
                cove_store::open(bad).await,
                Err(cove_store::StoreError::Config(_))
            ),
            "{bad}"
        );
    }
    if let Some(url) = backends::postgres_url() {
        // A schema of its own, named in the URL as a user would name it.
        let schema = backends::PgSchema::create(&url, "open").await;
        let sep = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{sep}options[search_path]={}", schema.name);
        let opened = cove_store::open(&url).await;
        let checked = match &opened {
            Ok(store) => Some((store.backend(), store.token_count().await.ok())),
            Err(_) => None,
        };
        if let Ok(store) = opened {
            store.close().await;
        }
        schema.drop().await;
        assert_eq!(checked, Some(("postgres", Some(0))));
    }
}
