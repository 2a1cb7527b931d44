//! The PostgreSQL database tests may use: `COVE_TEST_POSTGRES_URL` (scripts/test.sh starts a
//! throwaway cluster and sets it).

/// The variable naming the PostgreSQL database tests may create schemas in.
pub const POSTGRES_URL_VAR: &str = "COVE_TEST_POSTGRES_URL";

/// The PostgreSQL URL, or `None` (with the reason printed: the caller skips its case) when
/// it is unset. Under CI (`CI` set to anything but `false`/`0`/empty) an unset URL panics.
pub fn postgres_url() -> Option<String> {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").unwrap_or_default();
            assert!(
                ci.is_empty() || ci == "false" || ci == "0",
                "{POSTGRES_URL_VAR} is unset under CI (scripts/test.sh starts a cluster and sets it)"
            );
            eprintln!("skipping: {POSTGRES_URL_VAR} is unset");
            None
        }
    }
}
