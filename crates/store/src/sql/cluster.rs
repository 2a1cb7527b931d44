//! The shared cluster state (both backends). Leadership is the backend's
//! ([`Backend::lead`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{NodeState, Operation};

use super::operations::row_to_operation;
use super::{json_array, query, to_i64, Backend, SqlRow};
use crate::{parse_enum, ClusterStore, Leadership, NodeRecord, PlacementRecord, StoreError};

fn row_to_node(r: &impl SqlRow) -> Result<NodeRecord, StoreError> {
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
impl<S: Backend> ClusterStore for S {
    async fn upsert_node(&self, n: &NodeRecord) -> Result<NodeState, StoreError> {
        let row = query(
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
        .fetch_one(&mut self.db())
        .await?;
        parse_enum(&row.try_get::<String, _>("state")?, NodeState::parse)
    }

    async fn node_heartbeat(
        &self,
        name: &str,
        report: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<NodeState>, StoreError> {
        let row = query(
            "UPDATE nodes SET report = $1, last_heartbeat_at = $2, \
             reason = CASE WHEN state = 'lost' THEN NULL ELSE reason END, \
             state = CASE WHEN state = 'lost' THEN 'ready' ELSE state END \
             WHERE name = $3 RETURNING state",
        )
        .bind(report)
        .bind(at)
        .bind(name)
        .fetch_optional(&mut self.db())
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
        let res = query("UPDATE nodes SET state = $1, reason = $2 WHERE name = $3")
            .bind(state.as_str())
            .bind(reason)
            .bind(name)
            .execute(&mut self.db())
            .await?;
        Ok(res > 0)
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let rows = query("SELECT * FROM nodes ORDER BY name")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_node).collect()
    }

    async fn put_placement(&self, p: &PlacementRecord) -> Result<(), StoreError> {
        query(
            "INSERT INTO placements (sandbox_id, node, vcpus, memory_mib) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (sandbox_id) DO UPDATE SET node = excluded.node, \
             vcpus = excluded.vcpus, memory_mib = excluded.memory_mib",
        )
        .bind(&p.sandbox_id)
        .bind(&p.node)
        .bind(i64::from(p.vcpus))
        .bind(to_i64(p.memory_mib)?)
        .execute(&mut self.db())
        .await?;
        Ok(())
    }

    async fn delete_placement(&self, sandbox_id: &str) -> Result<(), StoreError> {
        query("DELETE FROM placements WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn list_placements(&self) -> Result<Vec<PlacementRecord>, StoreError> {
        let rows = query("SELECT * FROM placements ORDER BY sandbox_id")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PlacementRecord {
                    sandbox_id: r.try_get("sandbox_id")?,
                    node: r.try_get("node")?,
                    vcpus: r.uint("vcpus")?,
                    memory_mib: r.uint("memory_mib")?,
                })
            })
            .collect()
    }

    async fn node_link_identity(
        &self,
        certificate: &str,
        key: &str,
    ) -> Result<(String, String), StoreError> {
        query(
            "INSERT INTO cluster_identity (name, certificate, private_key) \
             VALUES ('node-link', $1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(certificate)
        .bind(key)
        .execute(&mut self.db())
        .await?;
        let row =
            query("SELECT certificate, private_key FROM cluster_identity WHERE name = 'node-link'")
                .fetch_one(&mut self.db())
                .await?;
        Ok((row.try_get("certificate")?, row.try_get("private_key")?))
    }

    async fn lease_operations(
        &self,
        owner: &str,
        ids: &[String],
        until: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "UPDATE operations SET owner = $1, lease_until = $2 WHERE id IN {} \
             AND state IN ('pending', 'running') AND (owner IS NULL OR owner = $1) \
             RETURNING id",
            S::in_json_array(3)
        );
        let rows = query(&sql)
            .bind(owner)
            .bind(until)
            .bind(json_array(ids)?)
            .fetch_all(&mut self.db())
            .await?;
        let leased = rows
            .iter()
            .map(|r| r.try_get::<String, _>("id"))
            .collect::<Result<std::collections::HashSet<_>, _>>()?;
        // In the order asked.
        Ok(ids
            .iter()
            .filter(|id| leased.contains(*id))
            .cloned()
            .collect())
    }

    async fn claim_expired_operations(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        // One writer (SQLite) or row locks skipping rows another claimer holds (PostgreSQL)
        // make each claim one caller's.
        let sql = format!(
            "UPDATE operations SET owner = $1, lease_until = $2 WHERE id IN ( \
             SELECT id FROM operations WHERE state IN ('pending', 'running') \
             AND ((lease_until IS NOT NULL AND lease_until < $3) \
                  OR (lease_until IS NULL AND created_at < $4)) \
             ORDER BY created_at, id LIMIT $5{}) RETURNING *",
            S::SKIP_LOCKED
        );
        let rows = query(&sql)
            .bind(owner)
            .bind(until)
            .bind(now)
            .bind(stale_before)
            .bind(i64::from(limit))
            .fetch_all(&mut self.db())
            .await?;
        let mut ops = rows
            .iter()
            .map(row_to_operation)
            .collect::<Result<Vec<_>, _>>()?;
        ops.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(ops)
    }

    async fn try_lead(&self) -> Result<Option<Leadership>, StoreError> {
        self.lead().await
    }

    fn shared(&self) -> bool {
        S::SHARED
    }
}
