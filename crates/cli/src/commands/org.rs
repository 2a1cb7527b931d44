//! `cove org create|ls|get|quota`: orgs and their quotas (the admin token).

use clap::{Args, Subcommand};
use cove_api_types::{Org, Quotas};
use cove_client::Client;

use crate::table;

/// `cove org ...`.
#[derive(Debug, Subcommand)]
pub enum OrgVerb {
    /// Create an org; prints it.
    Create(CreateArgs),
    /// List orgs with their quotas.
    Ls(JsonArgs),
    /// Replace an org's quotas (an absent limit is unlimited); prints the org.
    Quota(CreateArgs),
}

/// An org id and its quotas.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Org id (a-z, 0-9, -; starting with a letter).
    pub id: String,
    /// Its quotas.
    #[command(flatten)]
    pub quotas: QuotaArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Quota flags (absent: unlimited).
#[derive(Debug, Args)]
pub struct QuotaArgs {
    /// Most sandboxes alive at once.
    #[arg(long)]
    pub max_running: Option<u32>,
    /// Most vCPUs of its sandboxes together.
    #[arg(long)]
    pub max_vcpus: Option<u32>,
    /// Most memory (MiB) of its sandboxes together.
    #[arg(long)]
    pub max_memory_mib: Option<u64>,
    /// Most creates per second.
    #[arg(long)]
    pub max_creates_per_s: Option<u32>,
}

impl QuotaArgs {
    fn quotas(&self) -> Quotas {
        Quotas {
            max_running: self.max_running,
            max_vcpus: self.max_vcpus,
            max_memory_mib: self.max_memory_mib,
            max_creates_per_s: self.max_creates_per_s,
        }
    }
}

/// `--json` only.
#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs an `org` verb.
pub async fn run(client: &Client, verb: OrgVerb) -> anyhow::Result<()> {
    let (orgs, json) = match verb {
        OrgVerb::Create(a) => (
            vec![client.create_org(&a.id, a.quotas.quotas()).await?],
            a.json,
        ),
        OrgVerb::Quota(a) => (
            vec![client.set_org_quotas(&a.id, &a.quotas.quotas()).await?],
            a.json,
        ),
        OrgVerb::Ls(a) => (client.orgs().await?.orgs, a.json),
    };
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&orgs)?);
    } else {
        print(&orgs);
    }
    Ok(())
}

fn limit<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn print(orgs: &[Org]) {
    let rows: Vec<Vec<String>> = orgs
        .iter()
        .map(|o| {
            let q = &o.quotas;
            vec![
                o.id.clone(),
                limit(q.max_running),
                limit(q.max_vcpus),
                limit(q.max_memory_mib),
                limit(q.max_creates_per_s),
                o.created_at.to_rfc3339(),
            ]
        })
        .collect();
    table::print(
        &[
            "ORG",
            "RUNNING",
            "VCPUS",
            "MEMORY_MIB",
            "CREATES/S",
            "CREATED",
        ],
        &rows,
    );
}
