//! Lifecycle events: recorded by the store with each state move (see
//! `ControlPlane::transition`), read through an [`EventFeed`] (which `GET /v1/events` streams).
//! A watch counter tells feeds that new events exist, so waiting costs no polling.

use std::sync::Arc;
use std::time::Duration;

use cove_api_types::Event;
use cove_store::Store;
use tokio::sync::watch;

use crate::{orgs, ControlPlane, ServiceError};

/// Most events returned by one read ([`EventFeed::next_page`]).
pub const EVENTS_PAGE: u32 = 500;

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

/// One reader of the event log, from a point on: the events the caller it was made for may
/// see (its org's; every org's for the system), read a page at a time, and a wait for new
/// ones. It keeps the caller's view after the caller's scope ended, so a surface can stream
/// it after its handler returned.
pub struct EventFeed {
    cp: ControlPlane,
    org: Option<String>,
    after: u64,
    changes: watch::Receiver<u64>,
}

impl EventFeed {
    /// The next events after the last one read (after the starting seq at first), oldest
    /// first, at most [`EVENTS_PAGE`]. A full page means more may be waiting.
    pub async fn next_page(&mut self) -> Result<Vec<Event>, ServiceError> {
        // Seen before reading: an event recorded during the read wakes the next wait.
        self.changes.borrow_and_update();
        let page = self
            .cp
            .inner
            .events
            .after(self.org.as_deref(), self.after)
            .await?;
        if let Some(last) = page.last() {
            self.after = last.seq;
        }
        Ok(page)
    }

    /// Waits until events may have been recorded since the last page was read, or until
    /// `at_most` passed (so a caller can check on its client now and then).
    pub async fn wait(&mut self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.changes.changed()).await;
    }
}

impl ControlPlane {
    /// A feed of the lifecycle events after `after` (`0`: from the oldest kept) for the caller
    /// in scope: its org's sandboxes' events, every org's for the system.
    pub fn event_feed(&self, after: u64) -> Result<EventFeed, ServiceError> {
        Ok(EventFeed {
            org: orgs::scope::listing_org()?,
            cp: self.clone(),
            after,
            changes: self.inner.events.subscribe(),
        })
    }
}
