//! `cove audit`: the audit log (the admin token: every org's; a key: its own org's).

use clap::Args;
use cove_client::Client;

use crate::table;

/// Options of `cove audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Records after this seq.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Most records.
    #[arg(long)]
    pub limit: Option<u32>,
    /// Only this org's (the admin token).
    #[arg(long)]
    pub org: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove audit`.
pub async fn run(client: &Client, a: AuditArgs) -> anyhow::Result<()> {
    let page = client.audit(a.after, a.limit, a.org.as_deref()).await?;
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = page
        .entries
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                e.time.to_rfc3339(),
                e.org.clone(),
                e.actor.clone(),
                e.action.clone(),
                e.resource.clone().unwrap_or_default(),
                format!("{} {}", e.status, e.outcome),
            ]
        })
        .collect();
    table::print(
        &[
            "SEQ", "TIME", "ORG", "ACTOR", "ACTION", "RESOURCE", "OUTCOME",
        ],
        &rows,
    );
    Ok(())
}
