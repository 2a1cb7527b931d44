//! `cove ops [ID]`: recent operations (of one sandbox when ID is a sandbox id), or one
//! operation when ID is an operation id.

use clap::Args;
use cove_api_types::Operation;
use cove_client::Client;

use crate::table;

/// Options of `cove ops`.
#[derive(Debug, Args)]
pub struct OpsArgs {
    /// An operation id (`op-…`) to show, or a sandbox id (`sb-…`) to list its operations.
    pub id: Option<String>,
    /// How many operations to list (default 50, at most 500).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove ops`.
pub async fn run(client: &Client, args: OpsArgs) -> anyhow::Result<()> {
    if let Some(id) = args.id.as_deref().filter(|id| id.starts_with("op-")) {
        let operation = client.get_operation(id).await?;
        if args.json {
            crate::outln!("{}", serde_json::to_string_pretty(&operation)?);
        } else {
            crate::out!("{}", describe(&operation));
        }
        return Ok(());
    }
    let operations = client
        .list_operations(args.id.as_deref(), args.limit)
        .await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&operations)?);
        return Ok(());
    }
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = operations
        .iter()
        .map(|op| {
            vec![
                op.id.clone(),
                op.kind.as_str().to_owned(),
                op.state.as_str().to_owned(),
                op.sandbox_id.clone().unwrap_or_default(),
                table::age(op.created_at, now),
                op.error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.code, e.message))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    table::print(
        &["ID", "KIND", "STATE", "SANDBOX", "CREATED", "ERROR"],
        &rows,
    );
    Ok(())
}

/// The text form of one operation.
fn describe(op: &Operation) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<10} {value}\n"));
    field("id:", &op.id);
    field("kind:", op.kind.as_str());
    field("state:", op.state.as_str());
    if let Some(id) = &op.sandbox_id {
        field("sandbox:", id);
    }
    if let Some(error) = &op.error {
        field("error:", &format!("{}: {}", error.code, error.message));
    }
    let time =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    field("created:", &time(op.created_at));
    field("updated:", &time(op.updated_at));
    field("deadline:", &time(op.deadline));
    out
}
