//! The next step, when a sandbox is not in the state a verb needs: errors about a paused or
//! suspended sandbox name the command that fixes it, and `--wake` (on `exec`, `cp` and
//! `files`) takes that step first.
//!
//! `resume` thaws a *paused* sandbox (its processes were frozen, still in memory) and refuses
//! a suspended one; `wake` brings back either: it resumes a paused sandbox and restores a
//! *suspended* one (its files were saved to the snapshot store and its node resources
//! released; on runc its processes restart).

use std::time::Duration;

use anyhow::bail;
use cove_api_types::{ErrorCode, LifecycleRequest, OperationState, SandboxState};
use cove_client::{Client, ClientError};

/// How long `--wake` waits for the resume or wake.
const WAKE_WAIT: Duration = Duration::from_secs(600);

/// Makes sure `sandbox` runs: resumes it when paused, wakes it when suspended (or on its way
/// there), waits for that, and says so on stderr. A sandbox being created, deleted or failed
/// is an error naming its state.
pub async fn ensure_running(client: &Client, sandbox: &str) -> anyhow::Result<()> {
    let state = client.get_sandbox(sandbox).await?.state;
    let verb = match state {
        SandboxState::Running | SandboxState::Creating => return Ok(()),
        SandboxState::Paused => "resume",
        SandboxState::Suspending | SandboxState::Suspended | SandboxState::Waking => "wake",
        other => bail!(
            "sandbox {sandbox} is {}: it cannot be woken",
            other.as_str()
        ),
    };
    let operation = client
        .lifecycle(sandbox, verb, &LifecycleRequest::default())
        .await?;
    let operation = client.wait_operation(&operation.id, WAKE_WAIT).await?;
    if operation.state != OperationState::Succeeded {
        let why = operation
            .error
            .map(|e| format!("{}: {}", e.code, e.message))
            .unwrap_or_else(|| operation.state.as_str().to_owned());
        bail!("cannot {verb} sandbox {sandbox}: {why}");
    }
    let done = if verb == "resume" { "resumed" } else { "woke" };
    eprintln!("cove: {done} sandbox {sandbox} (it was {})", state.as_str());
    Ok(())
}

/// Adds the next step to `err` when it says `sandbox` is not running or in the wrong state
/// for `verb` (`None` for verbs that need a running sandbox).
pub async fn explain(
    client: &Client,
    sandbox: &str,
    verb: Option<&str>,
    err: anyhow::Error,
) -> anyhow::Error {
    let code = err
        .downcast_ref::<ClientError>()
        .and_then(ClientError::api_body)
        .map(|body| body.code);
    if !matches!(
        code,
        Some(ErrorCode::SandboxNotRunning | ErrorCode::InvalidState)
    ) {
        return err;
    }
    let Ok(current) = client.get_sandbox(sandbox).await else {
        return err;
    };
    match hint(sandbox, current.state, verb) {
        Some(hint) => err.context(hint),
        None => err,
    }
}

/// The hint for `verb` (or any verb needing a running sandbox) on a sandbox in `state`.
fn hint(sandbox: &str, state: SandboxState, verb: Option<&str>) -> Option<String> {
    Some(match (verb, state) {
        (Some("resume"), SandboxState::Suspended | SandboxState::Suspending) => format!(
            "sandbox {sandbox} is {}: resume thaws a paused sandbox, wake brings back a \
             suspended (or paused) one; run 'cove wake {sandbox}'",
            state.as_str()
        ),
        (Some(_), _) => return None,
        (None, SandboxState::Paused) => {
            format!("sandbox {sandbox} is paused; run 'cove resume {sandbox}' (or pass --wake)")
        }
        (None, SandboxState::Suspended | SandboxState::Suspending) => format!(
            "sandbox {sandbox} is {}; run 'cove wake {sandbox}' (or pass --wake)",
            state.as_str()
        ),
        (None, SandboxState::Degraded) => format!(
            "sandbox {sandbox} is degraded: its guest agent failed and the node is repairing it \
             (its files are kept); retry in a few seconds ('cove get {sandbox}' shows why)"
        ),
        (None, SandboxState::Waking) => {
            format!("sandbox {sandbox} is waking; wait for 'cove wake {sandbox}' to finish")
        }
        (None, other) => format!("sandbox {sandbox} is {}", other.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_the_next_step() {
        let h = |state, verb| hint("sb-1", state, verb).unwrap_or_default();
        assert!(h(SandboxState::Suspended, None).contains("run 'cove wake sb-1'"));
        assert!(h(SandboxState::Paused, None).contains("run 'cove resume sb-1'"));
        assert!(h(SandboxState::Degraded, None).contains("repairing it"));
        assert!(h(SandboxState::Suspended, Some("resume")).contains("run 'cove wake sb-1'"));
        assert!(h(SandboxState::Suspended, Some("resume")).contains("resume thaws a paused"));
        assert_eq!(
            hint("sb-1", SandboxState::Paused, Some("wake")),
            None,
            "wake resumes"
        );
        assert_eq!(hint("sb-1", SandboxState::Running, Some("pause")), None);
    }
}
