//! Leadership of the controllers (PostgreSQL): a session advisory lock keyed
//! `(LOCK_LEADER, hashtext(current_schema()))` (so databases' schemas elect apart), held on a
//! connection of its own outside the pool.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tracing::warn;

use super::{PgStore, LOCK_LEADER};
use crate::{Leadership, StoreError};

/// How often the leader's lock connection is checked.
const LEADER_CHECK: Duration = Duration::from_secs(1);
/// How long a check may take before the connection counts as lost.
const LEADER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Takes the leader lock when no other replica holds it ([`crate::ClusterStore::try_lead`]).
pub(super) async fn lead(store: &PgStore) -> Result<Option<Leadership>, StoreError> {
    let mut conn = PgConnection::connect_with(&store.opts).await?;
    let got: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext(current_schema()))")
            .bind(LOCK_LEADER)
            .fetch_one(&mut conn)
            .await?;
    if !got {
        let _ = conn.close().await;
        return Ok(None);
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let keeper = tokio::spawn(async move {
        loop {
            tokio::time::sleep(LEADER_CHECK).await;
            let alive = tokio::time::timeout(LEADER_CHECK_TIMEOUT, conn.ping()).await;
            if !matches!(alive, Ok(Ok(()))) {
                warn!("the leader lock's connection failed: leadership lost");
                let _ = tx.send(true);
                break;
            }
        }
    });
    Ok(Some(Leadership::kept(rx, keeper)))
}
