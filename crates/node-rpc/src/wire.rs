//! Envelope helpers shared by both sides: JSON of the contract's types, bearer tokens, version
//! checks, and tonic statuses.

use cove_node_api::NodeError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use crate::{Method, PROTOCOL_FLOOR, PROTOCOL_VERSION};

/// JSON of a contract value. Serialising the contract's own types cannot fail (no maps with
/// non-string keys, no foreign serialisers); an error still becomes a value, not a panic.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| {
        serde_json::to_vec(&Err::<(), _>(NodeError::Internal(format!("encode: {e}"))))
            .unwrap_or_default()
    })
}

/// Decodes a peer's JSON; a malformed one is the peer's fault (`Internal` on the client side).
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, NodeError> {
    serde_json::from_slice(bytes).map_err(|e| NodeError::Internal(format!("malformed reply: {e}")))
}

/// Decodes call arguments on the serving side (`INVALID_ARGUMENT` when malformed).
pub(crate) fn args<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(bytes).map_err(|e| Status::invalid_argument(format!("arguments: {e}")))
}

/// Attaches the bearer token to a request.
pub(crate) fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut req = Request::new(message);
    if let Ok(v) = MetadataValue::try_from(format!("Bearer {token}")) {
        req.metadata_mut().insert("authorization", v);
    }
    req
}

/// Checks a request's bearer token in constant time.
pub(crate) fn check_token<T>(req: &Request<T>, token: &str) -> Result<(), Status> {
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let same: bool = subtle::ConstantTimeEq::ct_eq(given.as_bytes(), token.as_bytes()).into();
    if same {
        Ok(())
    } else {
        Err(Status::unauthenticated("missing or wrong join token"))
    }
}

/// Refuses a peer below the floor ([`PROTOCOL_FLOOR`]); a newer one is taken (it speaks ours).
pub(crate) fn check_version(version: u32) -> Result<(), Status> {
    if version >= PROTOCOL_FLOOR {
        Ok(())
    } else {
        Err(Status::failed_precondition(format!(
            "protocol version {version} is below {PROTOCOL_FLOOR}, the oldest this side \
             (v{PROTOCOL_VERSION}) accepts"
        )))
    }
}

/// Refuses a call whose method is newer than the version its caller claims (the caller
/// checks first, so this only meets a misbehaving one) or unknown here.
pub(crate) fn check_call(version: u32, method: u32) -> Result<Method, Status> {
    check_version(version)?;
    let method = Method::from_number(method)
        .ok_or_else(|| Status::unimplemented(format!("unknown method {method}")))?;
    method
        .check(version.min(PROTOCOL_VERSION))
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
    Ok(method)
}

/// A transport failure seen by the caller.
pub(crate) fn unreachable(status: Status) -> NodeError {
    NodeError::NodeUnreachable(format!("{:?}: {}", status.code(), status.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_side_takes_callers_from_the_floor_and_only_methods_they_know() {
        let below = check_version(PROTOCOL_FLOOR - 1).expect_err("below the floor");
        assert_eq!(below.code(), tonic::Code::FailedPrecondition);
        assert!(below.message().contains(&format!("below {PROTOCOL_FLOOR}")));
        // A newer caller is taken: it speaks ours.
        assert!(check_version(PROTOCOL_VERSION + 1).is_ok());
        let old = check_call(PROTOCOL_FLOOR, Method::AttachVolumes.number());
        assert_eq!(old.ok(), Some(Method::AttachVolumes));
        let newer = check_call(PROTOCOL_FLOOR, Method::Xattrs.number()).expect_err("v10 method");
        assert_eq!(newer.code(), tonic::Code::FailedPrecondition);
        assert!(newer.message().contains("xattrs"), "{}", newer.message());
        let unknown = check_call(PROTOCOL_VERSION, 9999).expect_err("no such method");
        assert_eq!(unknown.code(), tonic::Code::Unimplemented);
    }
}
