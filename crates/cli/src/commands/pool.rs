//! `cove pool put|ls|rm`: warm pools of booted sandboxes that serve matching creates at once.

use clap::{Args, Subcommand};
use cove_api_types::{Pool, PutPoolRequest};
use cove_client::Client;

use super::create::ResourceArgs;
use crate::table;

/// `cove pool ...`.
#[derive(Debug, Subcommand)]
pub enum PoolVerb {
    /// Create a pool or change its settings; prints the pool.
    Put(PutArgs),
    /// List pools with their sizes and hit/miss counters.
    Ls(PoolLsArgs),
    /// Delete a pool and the sandboxes it keeps ready.
    Rm(RmArgs),
}

/// Options of `cove pool put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// Pool name (a-z, 0-9, -).
    pub name: String,
    /// Template of its sandboxes.
    #[arg(short, long)]
    pub template: String,
    /// Release to keep (default: the latest, followed when a new one is built).
    #[arg(long)]
    pub release: Option<u32>,
    /// Sandboxes kept booted and idle.
    #[arg(long, default_value_t = 1)]
    pub min_ready: u32,
    /// Most sandboxes at once, ready and booting [default: min-ready, at least 1].
    #[arg(long)]
    pub max: Option<u32>,
    /// Size of its sandboxes: a create is served only when it asks for exactly this size.
    #[command(flatten)]
    pub resources: ResourceArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove pool ls`.
#[derive(Debug, Args)]
pub struct PoolLsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove pool rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Pool names.
    #[arg(required = true)]
    pub names: Vec<String>,
}

/// Runs a `pool` verb.
pub async fn run(client: &Client, verb: PoolVerb) -> anyhow::Result<()> {
    match verb {
        PoolVerb::Put(args) => {
            let request = PutPoolRequest {
                template: args.template,
                release: args.release,
                resources: args.resources.request(),
                min_ready: args.min_ready,
                max: args.max.unwrap_or(args.min_ready.max(1)),
            };
            let pool = client.put_pool(&args.name, &request).await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&pool)?);
            } else {
                print(&[pool]);
            }
        }
        PoolVerb::Ls(args) => {
            let list = client.pools().await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&list.pools)?);
            } else {
                print(&list.pools);
            }
        }
        PoolVerb::Rm(args) => {
            for name in &args.names {
                client.delete_pool(name).await?;
                crate::outln!("{name}");
            }
        }
    }
    Ok(())
}

fn print(pools: &[Pool]) {
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            let r = &p.resources;
            vec![
                p.name.clone(),
                p.template.clone(),
                p.release
                    .map_or_else(|| "latest".to_owned(), |n| n.to_string()),
                format!("{}cpu/{}MiB", r.vcpus, r.memory_mib),
                format!("{}/{}", p.ready, p.min_ready),
                p.starting.to_string(),
                p.max.to_string(),
                p.hits.to_string(),
                p.misses.to_string(),
            ]
        })
        .collect();
    table::print(
        &[
            "NAME", "TEMPLATE", "RELEASE", "SIZE", "READY", "STARTING", "MAX", "HITS", "MISSES",
        ],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn put_ls_rm_parse() {
        let cli = Cli::try_parse_from([
            "cove",
            "pool",
            "put",
            "warm",
            "-t",
            "base",
            "--min-ready",
            "3",
            "--max",
            "5",
            "--memory-mib",
            "1024",
        ])
        .expect("parses");
        let Verb::Pool(PoolVerb::Put(args)) = cli.verb else {
            panic!("expected put")
        };
        assert_eq!(
            (args.name.as_str(), args.template.as_str()),
            ("warm", "base")
        );
        assert_eq!((args.min_ready, args.max), (3, Some(5)));
        assert_eq!(args.resources.memory_mib, Some(1024));
        assert!(Cli::try_parse_from(["cove", "pool", "put", "warm"]).is_err());
        let cli = Cli::try_parse_from(["cove", "pool", "ls", "--json"]).expect("parses");
        assert!(matches!(
            cli.verb,
            Verb::Pool(PoolVerb::Ls(PoolLsArgs { json: true }))
        ));
        let cli = Cli::try_parse_from(["cove", "pool", "rm", "a", "b"]).expect("parses");
        let Verb::Pool(PoolVerb::Rm(args)) = cli.verb else {
            panic!("expected rm")
        };
        assert_eq!(args.names, ["a", "b"]);
    }
}
