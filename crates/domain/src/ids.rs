//! Resource ids: a short prefix, a dash, and 16 random lowercase letters/digits (≈ 82 bits).
//! Sandbox ids double as hostnames and container ids, so they use only `[a-z0-9-]`.

use rand::Rng;

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
const RANDOM_LEN: usize = 16;

fn new_id(prefix: &str) -> String {
    let mut rng = rand::thread_rng();
    let mut id = String::with_capacity(prefix.len() + 1 + RANDOM_LEN);
    id.push_str(prefix);
    id.push('-');
    for _ in 0..RANDOM_LEN {
        id.push(ALPHABET[rng.gen_range(0..ALPHABET.len())] as char);
    }
    id
}

/// A new sandbox id (`sb-…`).
pub fn new_sandbox_id() -> String {
    new_id("sb")
}

/// A new command id (`cmd-…`).
pub fn new_command_id() -> String {
    new_id("cmd")
}

/// A new operation id (`op-…`).
pub fn new_operation_id() -> String {
    new_id("op")
}

/// A new checkpoint id (`ck-…`).
pub fn new_checkpoint_id() -> String {
    new_id("ck")
}

/// A new volume id (`vol-…`): names a volume's image on its node.
pub fn new_volume_id() -> String {
    new_id("vol")
}

/// A new API key id (`key-…`).
pub fn new_key_id() -> String {
    new_id("key")
}

/// Whether `s` can be an org id: 1 to 40 of `[a-z0-9-]`, starting with a letter.
pub fn is_org_id(s: &str) -> bool {
    (1..=40).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A new request id (`req-…`).
pub fn new_request_id() -> String {
    new_id("req")
}

/// Whether `s` has the shape of an id with `prefix` (used to answer 404 without a lookup for
/// garbage, and to keep ids safe as path components and hostnames).
pub fn is_well_formed(prefix: &str, s: &str) -> bool {
    s.len() == prefix.len() + 1 + RANDOM_LEN
        && s.starts_with(prefix)
        && s.as_bytes()[prefix.len()] == b'-'
        && s.as_bytes()[prefix.len() + 1..]
            .iter()
            .all(|b| ALPHABET.contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_well_formed_and_distinct() {
        let a = new_sandbox_id();
        let b = new_sandbox_id();
        assert_ne!(a, b);
        assert!(is_well_formed("sb", &a));
        assert!(!is_well_formed("sb", "sb-../../etc"));
        assert!(!is_well_formed("cmd", &a));
    }
}
