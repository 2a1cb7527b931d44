//! Control-plane tests against the in-memory fake node (`cove-test-support`): the lifecycle
//! state machine, idempotency, deadlines, cancel, roll-backs, ordering, reconciliation, the
//! controller, and the mapping of node errors to API codes. No root, no runtime; time is
//! tokio's paused clock, moved only by the tests.

mod cancel;
mod checkpoints;
mod cluster;
mod command_retries;
mod commands;
mod controller;
mod create;
mod deadlines;
mod delete;
mod expiry;
mod file_templates;
mod files;
mod harness;
mod idempotency;
mod lifecycle;
mod metrics;
mod network;
mod no_caller;
mod one_node;
mod ordering;
mod org_settings;
mod orgs;
mod pools;
mod ports;
mod quotas;
mod reconcile;
mod release_pins;
mod repair;
mod replicas;
mod rollback;
mod streams;
mod volume_tokens;
mod volumes;
mod volumes_nodes;
mod volumes_objects;
