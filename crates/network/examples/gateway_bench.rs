//! Measures the egress gateway beside a direct veth path (needs root; everything it creates
//! lives in namespaces it makes and removes).
//!
//! `cargo run -p cove-network --example gateway_bench --release -- [ROUNDS] [MIB]`

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let mib: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let report = cove_network::lab::bench("cvbench", rounds, mib * 1024 * 1024).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
