//! Property tests of everything that parses untrusted request bytes: query strings, host
//! names, paths, Basic auth, and the JSON of every request message (the Connect envelope has
//! its own in [`crate::envelope`]).

use axum::http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use crate::model::envd;

fn any_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u8>(), 0..200)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

proptest! {
    #[test]
    fn query_parsers_never_panic(q in any_text()) {
        let _ = crate::rest::list::parse_list_query(Some(&q));
        let _ = crate::envd::files::parse_query(Some(&q));
    }

    #[test]
    fn host_routing_never_panics_and_names_a_plain_id(h in any_text()) {
        if let Some((id, _port)) = crate::dispatch::host_target(&h, None) {
            prop_assert!(id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        }
    }

    #[test]
    fn resolved_paths_are_clean_and_absolute(p in any_text(), root in any::<bool>()) {
        let user = if root { "root" } else { "user" };
        if let Ok(abs) = crate::envd::paths::resolve(&p, user) {
            prop_assert!(abs.starts_with('/'));
            prop_assert!(!abs.split('/').any(|c| c == ".." || c == "."));
        }
    }

    #[test]
    fn basic_auth_never_panics(v in proptest::collection::vec(any::<u8>(), 0..100)) {
        let mut h = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_bytes(&v) {
            h.insert("authorization", value);
            let _ = crate::envd::basic_user(&h);
        }
    }

    #[test]
    fn request_messages_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = serde_json::from_slice::<envd::StartRequest>(&b);
        let _ = serde_json::from_slice::<envd::SendInputRequest>(&b);
        let _ = serde_json::from_slice::<envd::StreamInputRequest>(&b);
        let _ = serde_json::from_slice::<envd::SendSignalRequest>(&b);
        let _ = serde_json::from_slice::<envd::UpdateRequest>(&b);
        let _ = serde_json::from_slice::<envd::ListDirRequest>(&b);
        let _ = serde_json::from_slice::<envd::WatchRequest>(&b);
    }
}
