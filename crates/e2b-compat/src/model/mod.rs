//! E2B's wire model: every body Cove answers an E2B SDK with, as serde types, by area.
//!
//! The field names, their casing, which optional fields are left out and which are sent as
//! `null`, and the spellings of enum values are E2B's (its OpenAPI spec for the REST API, the
//! protobuf JSON mapping for envd); the official SDKs are strict about some of them, so each
//! field's doc says what it holds and each optional one whether it is omitted or `null`.
//! Handlers build these values from Cove's service answers; nothing here calls a service.

pub mod envd;
pub mod errors;
pub mod logs;
pub mod metrics;
pub mod sandboxes;
pub mod snapshots;
pub mod volumes;

/// Asserts that `value` goes on the wire as the JSON `expected` (the same fields, values and
/// `null`s; the order of keys aside).
#[cfg(test)]
pub(crate) fn assert_wire<T: serde::Serialize>(value: &T, expected: &str) {
    let got = serde_json::to_value(value).expect("serializes");
    let want: serde_json::Value = serde_json::from_str(expected).expect("expected is JSON");
    assert_eq!(got, want, "got {got}");
}
