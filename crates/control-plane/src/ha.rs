//! Replicas on one shared store (PostgreSQL): every replica serves the API; one at a time, the
//! leader, runs the controllers ([`Controller`]: idle suspends, retention, node-loss
//! detection, reconciliation, pools, repairs) and takes over operations whose replica stopped
//! (`takeover.rs`).
//!
//! - Leadership is the store's ([`cove_store::ClusterStore::try_lead`]: a PostgreSQL advisory
//!   lock on a connection of its own). A replica that loses it stops its controllers and tries
//!   again every 2 s; a replica that dies loses it with its connection.
//! - Every replica runs the expiry loop ([`Expiry`]): a claim of an expired sandbox is a
//!   conditional write, so one replica acts on it whichever leads.
//! - Every replica renews the leases of the operations it runs every third of the lease, reads
//!   the shared node registry every second, and wakes its event and operation-log streams every
//!   second (what other replicas recorded reaches them so).
//!
//! The single-process server (SQLite) does not use this: it reconciles at start and runs its
//! controllers itself.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::orgs::scope::as_system;
use crate::{ControlPlane, Controller, Expiry};

/// How long a replica that does not lead waits before trying again.
const LEAD_RETRY: Duration = Duration::from_secs(2);
/// How often streams of events and operation logs re-read what other replicas recorded.
const OTHERS_TICK: Duration = Duration::from_secs(1);

/// The loops of one replica: leadership (controllers and takeovers while leading), lease
/// renewal, and the shared node registry.
pub struct Replica {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Replica {
    /// Starts the loops of `cp` as one replica among others on its shared store.
    pub fn start(cp: ControlPlane) -> Replica {
        let stop = CancellationToken::new();
        let id = cp.inner.cfg.replica_id.clone();
        let mut tasks = Vec::new();
        // The loops are no tenant's request: they run as the server (`orgs::scope`).
        let (lead_cp, token) = (cp.clone(), stop.clone());
        tasks.push(tokio::spawn(
            as_system(async move { lead_cp.lead_loop(token).await })
                .instrument(tracing::info_span!("leadership", replica = %id)),
        ));
        // Expiries are claimed by a conditional write: every replica looks for them.
        let (expiry_cp, token) = (cp.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let expiry = Expiry::start(expiry_cp);
            token.cancelled().await;
            expiry.stop().await;
        }));
        let (renew_cp, token) = (cp.clone(), stop.clone());
        tasks.push(tokio::spawn(as_system(async move {
            let every = renew_cp
                .inner
                .cfg
                .operation_lease
                .div_f32(3.0)
                .max(Duration::from_millis(100));
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(every) => {}
                }
                renew_cp.operations().renew_leases().await;
            }
        })));
        // Streams of events and operation logs wait on this process's change counters; what
        // other replicas record reaches them by this tick.
        let (tick_cp, token) = (cp.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(OTHERS_TICK) => {}
                }
                tick_cp.inner.events.notify();
                tick_cp.operations().changed_elsewhere();
            }
        }));
        if let Some(every) = cp.placement().sync_every() {
            let (placement, token) = (cp.placement().clone(), stop.clone());
            tasks.push(tokio::spawn(as_system(async move {
                loop {
                    if let Err(e) = placement.sync().await {
                        warn!(error = %e, "cannot read the shared node registry");
                    }
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = tokio::time::sleep(every) => {}
                    }
                }
            })));
        }
        Replica { stop, tasks }
    }

    /// Stops the loops (the controllers too, when leading: at most 10 s for their pass) and
    /// gives leadership up. Operations this replica runs keep running until the process ends;
    /// another replica takes over the ones it leaves unfinished.
    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }
    }
}

impl ControlPlane {
    async fn lead_loop(&self, stop: CancellationToken) {
        let every = self
            .inner
            .cfg
            .operation_lease
            .div_f32(3.0)
            .max(Duration::from_millis(100));
        while !stop.is_cancelled() {
            let mut lead = match self.store().try_lead().await {
                Ok(Some(lead)) => lead,
                Ok(None) => {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(LEAD_RETRY) => {}
                    }
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "cannot ask for leadership");
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(LEAD_RETRY) => {}
                    }
                    continue;
                }
            };
            info!("leading the controllers");
            crate::metrics::leader(true);
            let controller = Controller::start_leading(self.clone());
            loop {
                self.take_over_expired().await;
                if let Err(e) = self.settle_orphans().await {
                    warn!(error = %e, "cannot settle sandboxes left without an operation");
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = lead.lost() => break,
                    () = tokio::time::sleep(every) => {}
                }
            }
            controller.stop().await;
            crate::metrics::leader(false);
            if !stop.is_cancelled() {
                warn!("leadership lost: controllers stopped");
            }
            drop(lead);
        }
    }
}
