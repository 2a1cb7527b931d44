//! `cove get`: shows one sandbox.

use clap::Args;
use cove_api_types::Sandbox;
use cove_client::Client;

/// Options of `cove get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Sandbox id.
    pub id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove get`.
pub async fn run(client: &Client, args: GetArgs) -> anyhow::Result<()> {
    let sandbox = client.get_sandbox(&args.id).await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&sandbox)?);
    } else {
        crate::out!("{}", describe(&sandbox));
    }
    Ok(())
}

/// The text form: one `field: value` line each, then env and metadata.
fn describe(s: &Sandbox) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<10} {value}\n"));
    field("id:", &s.id);
    field(
        "template:",
        &format!("{} (release {})", s.template, s.release),
    );
    match &s.state_reason {
        Some(reason) => field("state:", &format!("{} ({reason})", s.state.as_str())),
        None => field("state:", s.state.as_str()),
    }
    field("runtime:", &s.runtime);
    let r = &s.resources;
    field(
        "resources:",
        &format!(
            "{} vCPU, {} MiB memory, {} processes",
            r.vcpus, r.memory_mib, r.pids_max
        ),
    );
    field("user:", &s.user);
    field("cwd:", &s.cwd);
    field(
        "created:",
        &s.created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    field(
        "updated:",
        &s.updated_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    if let Some(at) = s.expires_at {
        let at = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        field("expires:", &format!("{at} ({})", s.on_expiry.as_str()));
    }
    for (title, map) in [("env:", &s.env), ("metadata:", &s.metadata)] {
        if !map.is_empty() {
            out.push_str(title);
            out.push('\n');
            for (k, v) in map {
                out.push_str(&format!("  {k}={v}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_lists_fields() {
        let sandbox: Sandbox = serde_json::from_value(serde_json::json!({
            "id": "sb-1", "template": "base", "release": 2, "state": "running",
            "state_reason": null, "runtime": "runc",
            "resources": {"vcpus": 1, "memory_mib": 512, "pids_max": 1024},
            "env": {"A": "1"}, "metadata": {}, "cwd": "/home/user", "user": "user",
            "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:05Z"
        }))
        .expect("sandbox");
        let text = describe(&sandbox);
        assert!(
            text.starts_with("id:        sb-1\ntemplate:  base (release 2)\n"),
            "{text}"
        );
        assert!(text.contains("state:     running\n"), "{text}");
        assert!(text.contains("env:\n  A=1\n"), "{text}");
        assert!(!text.contains("metadata:"), "{text}");
        assert!(!text.contains("expires:"), "{text}");
        let expiring = Sandbox {
            expires_at: Some("2025-01-01T01:00:00Z".parse().expect("time")),
            on_expiry: cove_api_types::OnExpiry::Suspend,
            ..sandbox
        };
        assert!(
            describe(&expiring).contains("expires:   2025-01-01T01:00:00Z (suspend)\n"),
            "{}",
            describe(&expiring)
        );
    }
}
