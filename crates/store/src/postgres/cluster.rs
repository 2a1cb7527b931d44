//! The shared cluster state (PostgreSQL). Leadership is a session advisory lock keyed
//! `(LOCK_LEADER, hashtext(current_schema()))` (so databases' schemas elect apart), held on a
//! connection of its own outside the pool.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{NodeState, Operation};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};
use tracing::warn;

use super::operations::row_to_operation;
use super::{from_i64, to_i64, PgStore, LOCK_LEADER};
use crate::{parse_enum, ClusterStore, Leadership, NodeRecord, PlacementRecord, StoreError};

/// How often the leader's lock connection is checked.
const LEADER_CHECK: Duration = Duration::from_secs(1);
/// How long a check may take before the connection counts as lost.
const LEADER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

fn row_to_node(r: &PgRow) -> Result<NodeRecord, StoreError> {
    Ok(NodeRecord {
        name: r.try_get("name")?,
        address: r.try_get("address")?,
        certificate: r.try_get("certificate")?,
        report: r.try_get("report")?,
        state: parse_enum(&r.try_get::<String, _>("state")?, NodeState::parse)?,
        reason: r.try_get("reason")?,
        last_heartbeat_at: r.try_get("last_heartbeat_at")?,
    })
}

#[async_trait]
impl ClusterStore for PgStore {
    async fn upsert_node(&self, n: &NodeRecord) -> Result<NodeState, StoreError> {
        let row = sqlx::query(
            "INSERT INTO nodes (name, address, certificate, report, state, reason, \
             last_heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (name) DO UPDATE SET address = excluded.address, \
             certificate = excluded.certificate, report = excluded.report, \
             last_heartbeat_at = excluded.last_heartbeat_at, \
             reason = CASE WHEN nodes.state IN ('draining', 'quarantined') THEN nodes.reason \
                      ELSE excluded.reason END, \
             state = CASE WHEN nodes.state IN ('draining', 'quarantined') THEN nodes.state \
                     ELSE excluded.state END \
             RETURNING state",
        )
        .bind(&n.name)
        .bind(&n.address)
        .bind(&n.certificate)
        .bind(&n.report)
        .bind(n.state.as_str())
        .bind(&n.reason)
        .bind(n.last_heartbeat_at)
        .fetch_one(&self.pool)
        .await?;
        parse_enum(&row.try_get::<String, _>("state")?, NodeState::parse)
    }

    async fn node_heartbeat(
        &self,
        name: &str,
        report: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<NodeState>, StoreError> {
        let row = sqlx::query(
            "UPDATE nodes SET report = $1, last_heartbeat_at = $2, \
             reason = CASE WHEN state = 'lost' THEN NULL ELSE reason END, \
             state = CASE WHEN state = 'lost' THEN 'ready' ELSE state END \
             WHERE name = $3 RETURNING state",
        )
        .bind(report)
        .bind(at)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| parse_enum(&r.try_get::<String, _>("state")?, NodeState::parse))
            .transpose()
    }

    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let res = sqlx::query("UPDATE nodes SET state = $1, reason = $2 WHERE name = $3")
            .bind(state.as_str())
            .bind(reason)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let rows = sqlx::query("SELECT * FROM nodes ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_node).collect()
    }

    async fn put_placement(&self, p: &PlacementRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO placements (sandbox_id, node, vcpus, memory_mib) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (sandbox_id) DO UPDATE SET node = excluded.node, \
             vcpus = excluded.vcpus, memory_mib = excluded.memory_mib",
        )
        .bind(&p.sandbox_id)
        .bind(&p.node)
        .bind(i64::from(p.vcpus))
        .bind(to_i64(p.memory_mib)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delete_placement(&self, sandbox_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM placements WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn list_placements(&self) -> Result<Vec<PlacementRecord>, StoreError> {
        let rows = sqlx::query("SELECT * FROM placements ORDER BY sandbox_id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PlacementRecord {
                    sandbox_id: r.try_get("sandbox_id")?,
                    node: r.try_get("node")?,
                    vcpus: from_i64(r.try_get("vcpus")?, "vcpus")?,
                    memory_mib: from_i64(r.try_get("memory_mib")?, "memory_mib")?,
                })
            })
            .collect()
    }

    async fn node_link_identity(
        &self,
        certificate: &str,
        key: &str,
    ) -> Result<(String, String), StoreError> {
        sqlx::query(
            "INSERT INTO cluster_identity (name, certificate, private_key) \
             VALUES ('node-link', $1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(certificate)
        .bind(key)
        .execute(&self.pool)
        .await?;
        let row = sqlx::query(
            "SELECT certificate, private_key FROM cluster_identity WHERE name = 'node-link'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.try_get("certificate")?, row.try_get("private_key")?))
    }

    async fn lease_operations(
        &self,
        owner: &str,
        ids: &[String],
        until: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "UPDATE operations SET owner = $1, lease_until = $2 WHERE id = ANY($3) \
             AND state IN ('pending', 'running') AND (owner IS NULL OR owner = $1) \
             RETURNING id",
        )
        .bind(owner)
        .bind(until)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("id").map_err(StoreError::from))
            .collect()
    }

    async fn claim_expired_operations(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        // Row locks (skipping rows another claimer holds) make each claim one caller's.
        let rows = sqlx::query(
            "UPDATE operations SET owner = $1, lease_until = $2 WHERE id IN ( \
             SELECT id FROM operations WHERE state IN ('pending', 'running') \
             AND ((lease_until IS NOT NULL AND lease_until < $3) \
                  OR (lease_until IS NULL AND created_at < $4)) \
             ORDER BY created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) RETURNING *",
        )
        .bind(owner)
        .bind(until)
        .bind(now)
        .bind(stale_before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut ops = rows
            .iter()
            .map(row_to_operation)
            .collect::<Result<Vec<_>, _>>()?;
        ops.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(ops)
    }

    async fn try_lead(&self) -> Result<Option<Leadership>, StoreError> {
        let mut conn = PgConnection::connect_with(&self.opts).await?;
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

    fn shared(&self) -> bool {
        true
    }
}
