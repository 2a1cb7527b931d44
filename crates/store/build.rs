//! Rebuilds the crate when a migration is added, renamed or edited: `sqlx::migrate!` embeds
//! the migration directories at compile time, and stable Rust cannot tell cargo it read them.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
