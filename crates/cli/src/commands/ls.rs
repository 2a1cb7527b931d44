//! `cove ls`: lists sandboxes.

use clap::Args;
use cove_api_types::SandboxState;
use cove_client::{Client, ListSandboxes};

use crate::table;

/// Options of `cove ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sandboxes in this state (creating, running, paused, ..., failed).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<SandboxState>,
    /// Only sandboxes of this template.
    #[arg(short, long)]
    pub template: Option<String>,
    /// Only sandboxes with this metadata (repeatable; all must match), as
    /// `GET /v1/sandboxes?metadata.KEY=VALUE`.
    #[arg(short, long = "metadata", value_name = "K=V", value_parser = super::exec::parse_key_value)]
    pub metadata: Vec<(String, String)>,
    /// Print JSON (an array of sandboxes) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parses a sandbox state by its wire name.
fn parse_state(s: &str) -> Result<SandboxState, String> {
    SandboxState::parse(s).ok_or_else(|| format!("unknown sandbox state `{s}`"))
}

/// Runs `cove ls`, following every page.
pub async fn run(client: &Client, args: LsArgs) -> anyhow::Result<()> {
    let mut filter = ListSandboxes {
        state: args.state,
        template: args.template,
        metadata: args.metadata,
        ..Default::default()
    };
    let mut sandboxes = Vec::new();
    loop {
        let page = client.list_sandboxes(&filter).await?;
        sandboxes.extend(page.sandboxes);
        match page.next_cursor {
            Some(cursor) if filter.cursor.as_ref() != Some(&cursor) => filter.cursor = Some(cursor),
            _ => break,
        }
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&sandboxes)?);
        return Ok(());
    }
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = sandboxes
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.template.clone(),
                s.state.as_str().to_owned(),
                table::age(s.created_at, now),
                s.metadata
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ]
        })
        .collect();
    table::print(&["ID", "TEMPLATE", "STATE", "CREATED", "METADATA"], &rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn filters_parse() {
        let cli = Cli::try_parse_from([
            "cove", "ls", "--state", "running", "-t", "base", "--json", "-m", "team=red",
        ])
        .expect("parses");
        let Verb::Ls(args) = cli.verb else {
            panic!("expected ls")
        };
        assert_eq!(args.state, Some(SandboxState::Running));
        assert_eq!(args.template.as_deref(), Some("base"));
        assert!(args.json);
        assert_eq!(args.metadata, [("team".to_owned(), "red".to_owned())]);
        assert!(Cli::try_parse_from(["cove", "ls", "--state", "asleep"]).is_err());
    }
}
