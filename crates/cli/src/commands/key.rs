//! `cove key create|ls|revoke`: API keys of an org (the admin token). A key's secret is printed
//! once, at creation.

use clap::{Args, Subcommand};
use cove_api_types::ApiKey;
use cove_client::Client;

use crate::table;

/// `cove key ...`.
#[derive(Debug, Subcommand)]
pub enum KeyVerb {
    /// Create a key of an org; prints its secret (shown this once) on stdout.
    Create(CreateArgs),
    /// List an org's keys (no secrets).
    Ls(LsArgs),
    /// Revoke a key: it answers 401 from then on.
    Revoke(RevokeArgs),
}

/// Options of `cove key create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The org.
    #[arg(long)]
    pub org: String,
    /// A name to tell keys apart.
    #[arg(long, default_value = "")]
    pub name: String,
    /// Print the key and its secret as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove key ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The org.
    #[arg(long)]
    pub org: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `cove key revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The org.
    #[arg(long)]
    pub org: String,
    /// Key ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

/// Runs a `key` verb.
pub async fn run(client: &Client, verb: KeyVerb) -> anyhow::Result<()> {
    match verb {
        KeyVerb::Create(a) => {
            let made = client.create_api_key(&a.org, &a.name).await?;
            if a.json {
                crate::outln!("{}", serde_json::to_string_pretty(&made)?);
            } else {
                crate::outln!("{}", made.secret);
            }
        }
        KeyVerb::Ls(a) => {
            let keys = client.api_keys(&a.org).await?.keys;
            if a.json {
                crate::outln!("{}", serde_json::to_string_pretty(&keys)?);
            } else {
                print(&keys);
            }
        }
        KeyVerb::Revoke(a) => {
            for id in &a.ids {
                client.revoke_api_key(&a.org, id).await?;
                crate::outln!("{id}");
            }
        }
    }
    Ok(())
}

fn print(keys: &[ApiKey]) {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.id.clone(),
                k.name.clone(),
                format!("{}…", k.prefix),
                k.created_at.to_rfc3339(),
                k.revoked_at
                    .map_or_else(|| "-".to_owned(), |t| t.to_rfc3339()),
            ]
        })
        .collect();
    table::print(&["ID", "NAME", "PREFIX", "CREATED", "REVOKED"], &rows);
}
