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
    /// Only the events of this sandbox (e.g. what its commands' connections were refused).
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
}

/// Runs `cove events`: prints `SEQ TIME TYPE SANDBOX [OPERATION] [-> DESTINATION] [(REASON)]
/// [rule: RULE]` per event.
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
        if args
            .sandbox
            .as_ref()
            .is_some_and(|s| *s != event.sandbox_id)
        {
            continue;
        }
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
    if let Some(rule) = &e.rule {
        out.push_str(&format!(" rule: {rule}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_shows_its_destination_reason_and_rule() {
        let e: Event = serde_json::from_value(serde_json::json!({
            "seq": 7, "time": "2026-01-02T03:04:05Z", "type": "network.denied",
            "sandbox_id": "sb-1", "operation_id": null, "reason": "denied",
            "destination": "b.test (203.0.113.20:80)", "host": "b.test", "port": 80,
            "rule": "deny b.test"
        }))
        .expect("event");
        assert_eq!(
            line(&e),
            "7 2026-01-02T03:04:05.000Z network.denied sb-1 -> b.test (203.0.113.20:80) \
             (denied) rule: deny b.test"
        );
    }
}
