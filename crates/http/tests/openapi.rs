//! `docs/openapi.json` is the document the server serves at `/v1/openapi.json`; this fails
//! when they drift. Regenerate it with
//! `COVE_UPDATE_OPENAPI=1 cargo test -p cove-http --test openapi`.

use std::path::PathBuf;

use cove_http::openapi::openapi_pretty_json;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn checked_in_document_matches_the_code() {
    let generated = openapi_pretty_json();
    let path = checked_in();
    if std::env::var_os("COVE_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write docs/openapi.json");
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/openapi.json differs from the API the code serves; regenerate it with \
         `COVE_UPDATE_OPENAPI=1 cargo test -p cove-http --test openapi` and commit it"
    );
}

#[test]
fn every_operation_documents_errors_and_auth() {
    let doc: serde_json::Value = serde_json::from_str(&openapi_pretty_json()).expect("json");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 30, "{} paths", paths.len());
    for (path, item) in paths {
        for (method, op) in item.as_object().expect("path item") {
            let default = &op["responses"]["default"]["content"]["application/json"]["schema"];
            assert_eq!(
                default["$ref"], "#/components/schemas/ErrorBody",
                "{method} {path}"
            );
            let open = ["/healthz", "/metrics", "/v1/openapi.json"].contains(&path.as_str());
            assert_eq!(op.get("security").is_none(), open, "{method} {path}");
        }
    }
    let codes = &doc["components"]["schemas"]["ErrorCode"];
    assert!(
        codes.to_string().contains("sandbox_not_found"),
        "ErrorCode lists the wire codes: {codes}"
    );
}

#[test]
fn operation_ids_are_unique() {
    let doc: serde_json::Value = serde_json::from_str(&openapi_pretty_json()).expect("json");
    let mut seen = std::collections::BTreeSet::new();
    for item in doc["paths"].as_object().expect("paths").values() {
        for op in item.as_object().expect("item").values() {
            let id = op["operationId"].as_str().expect("operationId").to_string();
            assert!(seen.insert(id.clone()), "operationId {id} twice");
        }
    }
}

#[test]
fn event_streams_describe_their_events() {
    let doc: serde_json::Value = serde_json::from_str(&openapi_pretty_json()).expect("json");
    let schema = &doc["paths"]["/v1/operations/{id}/logs"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"]["schema"];
    assert_eq!(
        schema["properties"]["event"]["enum"],
        serde_json::json!(["log", "progress", "done"])
    );
    assert_eq!(
        schema["properties"]["data"]["contentSchema"]["$ref"],
        "#/components/schemas/OperationLogEvent"
    );
}
