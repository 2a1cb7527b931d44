//! The shared cluster state (SQLite): one process owns the file, so it always leads.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{NodeState, Operation};
use sqlx::Row;

use super::operations::row_to_operation;
use super::SqliteStore;
use crate::{parse_enum, ClusterStore, Leadership, NodeRecord, PlacementRecord, StoreError};

fn row_to_node(r: &sqlx::sqlite::SqliteRow) -> Result<NodeRecord, StoreError> {
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
impl ClusterStore for SqliteStore {
    async fn upsert_node(&self, n: &NodeRecord) -> Result<NodeState, StoreError> {
        let row = sqlx::query(
            "INSERT INTO nodes (name, address, certificate, report, state, reason, \
             last_heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
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
            "UPDATE nodes SET report = ?, last_heartbeat_at = ?, \
             reason = CASE WHEN state = 'lost' THEN NULL ELSE reason END, \
             state = CASE WHEN state = 'lost' THEN 'ready' ELSE state END \
             WHERE name = ? RETURNING state",
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
        let res = sqlx::query("UPDATE nodes SET state = ?, reason = ? WHERE name = ?")
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
            "INSERT INTO placements (sandbox_id, node, vcpus, memory_mib) VALUES (?, ?, ?, ?) \
             ON CONFLICT (sandbox_id) DO UPDATE SET node = excluded.node, \
             vcpus = excluded.vcpus, memory_mib = excluded.memory_mib",
        )
        .bind(&p.sandbox_id)
        .bind(&p.node)
        .bind(i64::from(p.vcpus))
        .bind(p.memory_mib as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delete_placement(&self, sandbox_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM placements WHERE sandbox_id = ?")
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
                    vcpus: r.try_get::<i64, _>("vcpus")?.clamp(0, i64::from(u32::MAX)) as u32,
                    memory_mib: r.try_get::<i64, _>("memory_mib")?.max(0) as u64,
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
            "INSERT INTO cluster_identity (name, certificate, private_key) VALUES ('node-link', ?, ?) \
             ON CONFLICT (name) DO NOTHING",
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
        let mut tx = self.pool.begin().await?;
        let mut leased = Vec::with_capacity(ids.len());
        for id in ids {
            let res = sqlx::query(
                "UPDATE operations SET owner = ?, lease_until = ? WHERE id = ? \
                 AND state IN ('pending', 'running') AND (owner IS NULL OR owner = ?)",
            )
            .bind(owner)
            .bind(until)
            .bind(id)
            .bind(owner)
            .execute(&mut *tx)
            .await?;
            if res.rows_affected() > 0 {
                leased.push(id.clone());
            }
        }
        tx.commit().await?;
        Ok(leased)
    }

    async fn claim_expired_operations(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        // One writer at a time: the select and the update are one step.
        let rows = sqlx::query(
            "UPDATE operations SET owner = ?, lease_until = ? WHERE id IN ( \
             SELECT id FROM operations WHERE state IN ('pending', 'running') \
             AND ((lease_until IS NOT NULL AND lease_until < ?) \
                  OR (lease_until IS NULL AND created_at < ?)) \
             ORDER BY created_at, id LIMIT ?) RETURNING *",
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
        Ok(Some(Leadership::forever()))
    }

    fn shared(&self) -> bool {
        false
    }
}
