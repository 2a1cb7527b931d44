//! Management tokens: random 32-byte secrets, stored only as SHA-256 hashes.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::{ControlPlane, ServiceError};

/// Prefix of management tokens, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "cove_";

/// A new random token (`cove_` + 43 base64url characters).
pub fn new_token() -> String {
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}

/// Hex SHA-256 of a token.
pub fn hash_token(token: &str) -> String {
    format!("{:x}", Sha256::digest(token.as_bytes()))
}

impl ControlPlane {
    /// Creates the admin token if the store has no token yet; returns it (once) so the caller
    /// can hand it to the operator.
    pub async fn bootstrap_admin_token(&self) -> Result<Option<String>, ServiceError> {
        if self.store().token_count().await? > 0 {
            return Ok(None);
        }
        let token = new_token();
        self.store()
            .insert_token("admin", "admin", &hash_token(&token))
            .await?;
        Ok(Some(token))
    }
}
