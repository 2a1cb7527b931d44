//! `cove events [--after SEQ]`: follows the lifecycle event stream (and the gateways'
//! `network.denied` refusals) until interrupted.

use clap::Args;
use cove_api_types::Event;
use cove_client::Client;
use futures::StreamExt;

/// Options of `cove events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Start after this event sequence number (default: every retained event).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Print each event as a JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove events`: prints `SEQ TIME TYPE SANDBOX [OPERATION] [-> DESTINATION] [(REASON)]`
/// per event.
pub async fn run(client: &Client, args: EventsArgs) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(client.events(args.after));
    let mut closed = std::pin::pin!(crate::output::stdout_closed());
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = &mut closed => crate::output::exit_stdout_closed(),
        };
        let Some(event) = event else { break };
        let event = event?;
        if args.json {
            crate::outln!("{}", serde_json::to_string(&event)?);
        } else {
            crate::outln!("{}", line(&event));
        }
    }
    Ok(())
}

fn line(e: &Event) -> String {
    let mut out = format!(
        "{} {} {} {}",
        e.seq,
        e.time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        e.kind.as_str(),
        e.sandbox_id
    );
    if let Some(op) = &e.operation_id {
        out.push(' ');
        out.push_str(op);
    }
    if let Some(dest) = &e.destination {
        out.push_str(&format!(" -> {dest}"));
    }
    if let Some(reason) = &e.reason {
        out.push_str(&format!(" ({reason})"));
    }
    out
}
