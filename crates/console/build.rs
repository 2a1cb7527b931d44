//! Rebuilds the crate when the console's built assets change (`include_dir!` does not tell
//! cargo what it read).

fn main() {
    println!("cargo:rerun-if-changed=../../console/dist");
}
