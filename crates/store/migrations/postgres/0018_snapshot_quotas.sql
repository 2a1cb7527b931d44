-- Cove store schema (PostgreSQL): a quota on snapshot bytes (checkpoints, imported ones too,
-- and the snapshots of suspended sandboxes), and the bytes of a suspended sandbox's snapshot.
-- A NULL limit is no limit; 0 bytes is no snapshot.
ALTER TABLE orgs ADD COLUMN max_snapshot_mib BIGINT;
ALTER TABLE sandboxes ADD COLUMN snapshot_bytes BIGINT NOT NULL DEFAULT 0;
