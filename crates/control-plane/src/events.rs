//! Lifecycle events: recorded by the store with each state move (see
//! `ControlPlane::transition`), streamed by `GET /v1/events`. A watch counter tells streams
//! that new events exist, so waiting costs no polling.

use std::sync::Arc;

use cove_api_types::Event;
use cove_store::Store;
use tokio::sync::watch;

use crate::ServiceError;

/// Most events returned by one read.
pub(crate) const EVENTS_PAGE: u32 = 500;

/// The event log's reader side and its change notifications.
pub(crate) struct Events {
    store: Arc<dyn Store>,
    changed: watch::Sender<u64>,
}

impl Events {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Events {
            store,
            changed: watch::channel(0).0,
        }
    }

    /// Tells waiting streams that events were recorded.
    pub(crate) fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A subscription to new events.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Events after `seq`, oldest first (at most [`EVENTS_PAGE`]); only those of `org`'s
    /// sandboxes when given.
    pub(crate) async fn after(
        &self,
        org: Option<&str>,
        seq: u64,
    ) -> Result<Vec<Event>, ServiceError> {
        Ok(self.store.events_after(org, seq, EVENTS_PAGE).await?)
    }
}
