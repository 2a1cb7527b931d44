//! Ends sandboxes at their E2B timeout: about once a second, every tracked sandbox whose end
//! of life has passed is deleted, or suspended when it was created with `autoPause`. At start
//! it adopts the sandboxes created through E2B before a restart (they get the default timeout
//! from then on, since the end of life is kept in memory only; whether it pauses or kills is
//! read from the sandbox's marker).

use std::time::Duration;

use self::tokio_util_shim::CancelOnDrop;
use chrono::Utc;
use cove_api_types::{LifecycleRequest, SandboxState};
use cove_control_plane::LifecycleVerb;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::rest::lifecycle::Lifecycle;
use crate::rest::E2B_MARKER_KEY;
use crate::{E2b, SandboxTtl, DEFAULT_TIMEOUT_S};

/// How often the reaper looks.
pub const REAP_EVERY: Duration = Duration::from_secs(1);

/// The running reaper; dropping it (or [`Reaper::stop`]) stops it.
pub struct Reaper {
    task: CancelOnDrop,
}

mod tokio_util_shim {
    /// Aborts a task when dropped.
    pub struct CancelOnDrop(pub tokio::task::JoinHandle<()>);

    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
}

impl Reaper {
    /// Starts the loop.
    pub fn start(e2b: E2b) -> Reaper {
        let task: JoinHandle<()> = tokio::spawn(async move {
            adopt(&e2b).await;
            loop {
                tokio::time::sleep(REAP_EVERY).await;
                reap(&e2b).await;
            }
        });
        Reaper {
            task: CancelOnDrop(task),
        }
    }

    /// Stops the loop.
    pub fn stop(self) {
        drop(self.task);
    }
}

async fn adopt(e2b: &E2b) {
    let Ok(sandboxes) = e2b.sandboxes_in(None).await else {
        return;
    };
    let live = [SandboxState::Running, SandboxState::Creating];
    for s in sandboxes.into_iter().filter(|s| live.contains(&s.state)) {
        if s.metadata.contains_key(E2B_MARKER_KEY) && e2b.ttl_of(&s.id).is_none() {
            e2b.set_ttl(
                &s.id,
                SandboxTtl {
                    end_at: Utc::now() + chrono::Duration::seconds(DEFAULT_TIMEOUT_S as i64),
                    auto_pause: Lifecycle::of(&s).auto_pause(),
                },
            );
        }
    }
}

async fn reap(e2b: &E2b) {
    let now = Utc::now();
    let due: Vec<(String, SandboxTtl)> = {
        let ttls = e2b.ttls.lock().unwrap_or_else(|p| p.into_inner());
        ttls.iter()
            .filter(|(_, t)| t.end_at <= now)
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect()
    };
    for (id, ttl) in due {
        let state = match e2b.cp.get_sandbox(&id).await {
            Ok(s) => s.state,
            Err(_) => {
                e2b.forget(&id);
                continue;
            }
        };
        if ttl.auto_pause {
            if state == SandboxState::Running {
                match e2b
                    .cp
                    .lifecycle(
                        &id,
                        LifecycleVerb::Suspend,
                        LifecycleRequest::default(),
                        None,
                    )
                    .await
                {
                    Ok(op) => info!(sandbox_id = %id, op_id = %op.id, "e2b timeout: pausing"),
                    Err(e) => warn!(sandbox_id = %id, error = %e, "e2b timeout: cannot pause"),
                }
            }
            // Paused sandboxes do not expire; a connect sets a new end of life.
            e2b.clear_ttl(&id);
            continue;
        }
        match e2b.cp.delete_sandbox(&id, None).await {
            Ok(op) => info!(sandbox_id = %id, op_id = %op.id, "e2b timeout: deleting"),
            Err(e) => warn!(sandbox_id = %id, error = %e, "e2b timeout: cannot delete"),
        }
        e2b.forget(&id);
        e2b.watchers.forget_sandbox(&id);
    }
}
