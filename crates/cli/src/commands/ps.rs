//! `cove ps SANDBOX [-a]`: the commands of a sandbox (running ones; `-a` also ended ones).

use clap::Args;
use cove_api_types::{Command, CommandState};
use cove_client::Client;

use crate::table;

/// Options of `cove ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Sandbox id.
    pub sandbox: String,
    /// Also list ended commands (kept until deleted).
    #[arg(short, long)]
    pub all: bool,
    /// Print JSON (an array of commands) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove ps`: `ID PID STATE EXIT STARTED COMMAND`, oldest first.
pub async fn run(client: &Client, args: PsArgs) -> anyhow::Result<()> {
    let state = (!args.all).then_some(CommandState::Running);
    let commands = client
        .list_commands_in(&args.sandbox, state)
        .await?
        .commands;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&commands)?);
        return Ok(());
    }
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = commands
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.pid.to_string(),
                state_name(c).to_owned(),
                exit_text(c),
                table::age(c.started_at, now),
                command_line(c),
            ]
        })
        .collect();
    table::print(&["ID", "PID", "STATE", "EXIT", "STARTED", "COMMAND"], &rows);
    Ok(())
}

fn state_name(c: &Command) -> &'static str {
    match c.state {
        CommandState::Running => "running",
        CommandState::Exited => "exited",
    }
}

/// `3`, `SIGKILL`, `SIGKILL (oom)`, `SIGKILL (timeout)`, or `-` while running.
fn exit_text(c: &Command) -> String {
    let base = match (&c.exit_code, &c.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => signal.clone(),
        (None, None) => return "-".to_owned(),
    };
    match (c.oom_killed, c.timed_out) {
        (true, _) => format!("{base} (oom)"),
        (_, true) => format!("{base} (timeout)"),
        _ => base,
    }
}

/// The argv joined by spaces, cut at 60 characters.
fn command_line(c: &Command) -> String {
    let line = c.argv.join(" ").replace('\n', " ");
    if line.chars().count() > 60 {
        format!("{}...", line.chars().take(57).collect::<String>())
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn ps_parses() {
        let cli = Cli::try_parse_from(["cove", "ps", "sb-1", "-a"]).expect("parses");
        let Verb::Ps(args) = cli.verb else {
            panic!("expected ps")
        };
        assert_eq!((args.sandbox.as_str(), args.all), ("sb-1", true));
        assert!(Cli::try_parse_from(["cove", "ps"]).is_err());
    }
}
