//! `cove org create|ls|quota|features|retention`: orgs, their quotas, the features turned off
//! for them and their checkpoint retention (the admin token).

use clap::{Args, Subcommand};
use cove_api_types::{
    CheckpointRetention, CreateOrgRequest, Feature, Org, Quotas, UpdateOrgRequest,
};
use cove_client::Client;

use crate::table;

/// `cove org ...`.
#[derive(Debug, Subcommand)]
pub enum OrgVerb {
    /// Create an org; prints it.
    Create(CreateArgs),
    /// List orgs with their quotas, disabled features and checkpoint retention.
    Ls(JsonArgs),
    /// Replace an org's quotas (an absent limit is unlimited); prints the org.
    Quota(QuotaSetArgs),
    /// Set the features turned off for an org (they answer 403 feature_disabled to it);
    /// without `--disable` every feature is back on. Prints the org.
    Features(FeaturesArgs),
    /// Replace an org's checkpoint retention (an absent limit is none); prints the org.
    Retention(RetentionArgs),
}

/// `cove org create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Org id (a-z, 0-9, -; starting with a letter).
    pub id: String,
    /// Its quotas.
    #[command(flatten)]
    pub quotas: QuotaArgs,
    /// Features turned off for it, comma-separated (checkpoints, fork, export, volumes).
    #[arg(long, value_delimiter = ',', value_parser = parse_feature)]
    pub disable: Vec<Feature>,
    /// Its checkpoint retention.
    #[command(flatten)]
    pub retention: RetentionFlags,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `cove org features`.
#[derive(Debug, Args)]
pub struct FeaturesArgs {
    /// Org id.
    pub id: String,
    /// Features turned off, comma-separated (checkpoints, fork, export, volumes); replaces
    /// the org's list.
    #[arg(long, value_delimiter = ',', value_parser = parse_feature)]
    pub disable: Vec<Feature>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `cove org retention`.
#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// Org id.
    pub id: String,
    /// The retention.
    #[command(flatten)]
    pub retention: RetentionFlags,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Checkpoint retention flags (absent: no limit). The server's retention pass (every
/// minute) deletes the checkpoints past them, oldest first.
#[derive(Debug, Args)]
pub struct RetentionFlags {
    /// Most checkpoints kept per sandbox (1 to 10000).
    #[arg(long)]
    pub checkpoint_max_per_sandbox: Option<u32>,
    /// Most age of a checkpoint, in seconds (60 to 315360000).
    #[arg(long)]
    pub checkpoint_max_age_s: Option<u64>,
}

impl RetentionFlags {
    fn retention(&self) -> CheckpointRetention {
        CheckpointRetention {
            max_per_sandbox: self.checkpoint_max_per_sandbox,
            max_age_s: self.checkpoint_max_age_s,
        }
    }
}

fn parse_feature(s: &str) -> Result<Feature, String> {
    Feature::parse(s.trim()).ok_or_else(|| {
        let known: Vec<_> = Feature::ALL.iter().map(|f| f.as_str()).collect();
        format!("unknown feature {s:?} (known: {})", known.join(", "))
    })
}

/// An org id and its quotas.
#[derive(Debug, Args)]
pub struct QuotaSetArgs {
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
    /// Most sandboxes that exist at once (every state but deleted; suspended ones too).
    #[arg(long)]
    pub max_sandboxes: Option<u32>,
    /// Most disk (MiB): its sandboxes' own disks and its volumes together.
    #[arg(long)]
    pub max_disk_mib: Option<u64>,
    /// Most snapshot bytes (MiB): its checkpoints (imported ones too) and its suspended
    /// sandboxes' snapshots together.
    #[arg(long)]
    pub max_snapshot_mib: Option<u64>,
}

impl QuotaArgs {
    fn quotas(&self) -> Quotas {
        Quotas {
            max_running: self.max_running,
            max_vcpus: self.max_vcpus,
            max_memory_mib: self.max_memory_mib,
            max_creates_per_s: self.max_creates_per_s,
            max_sandboxes: self.max_sandboxes,
            max_disk_mib: self.max_disk_mib,
            max_snapshot_mib: self.max_snapshot_mib,
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
        OrgVerb::Create(a) => {
            let req = CreateOrgRequest {
                id: a.id,
                quotas: a.quotas.quotas(),
                disabled_features: a.disable,
                checkpoint_retention: a.retention.retention(),
            };
            (vec![client.create_org_with(&req).await?], a.json)
        }
        OrgVerb::Features(a) => {
            let req = UpdateOrgRequest {
                disabled_features: Some(a.disable),
                ..Default::default()
            };
            (vec![client.update_org(&a.id, &req).await?], a.json)
        }
        OrgVerb::Retention(a) => {
            let req = UpdateOrgRequest {
                checkpoint_retention: Some(a.retention.retention()),
                ..Default::default()
            };
            (vec![client.update_org(&a.id, &req).await?], a.json)
        }
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
                limit(q.max_sandboxes),
                limit(q.max_disk_mib),
                limit(q.max_snapshot_mib),
                if o.disabled_features.is_empty() {
                    "-".to_owned()
                } else {
                    let names: Vec<_> = o.disabled_features.iter().map(|f| f.as_str()).collect();
                    names.join(",")
                },
                limit(o.checkpoint_retention.max_per_sandbox),
                limit(o.checkpoint_retention.max_age_s),
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
            "SANDBOXES",
            "DISK_MIB",
            "SNAPSHOT_MIB",
            "DISABLED",
            "CKPT_MAX",
            "CKPT_AGE_S",
            "CREATED",
        ],
        &rows,
    );
}
