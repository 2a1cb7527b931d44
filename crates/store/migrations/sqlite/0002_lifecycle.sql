-- Cove store schema v2 (SQLite): sandbox lifecycle (idle suspend, TTL, wake), lifecycle events,
-- and indexes for listing and purging operations.
ALTER TABLE sandboxes ADD COLUMN idle_timeout_s INTEGER NOT NULL DEFAULT 21600;
ALTER TABLE sandboxes ADD COLUMN ttl_s INTEGER;
ALTER TABLE sandboxes ADD COLUMN last_activity_at TEXT;
ALTER TABLE sandboxes ADD COLUMN memory_restored INTEGER;
-- The state a sandbox was in before `suspending` or `deleting`, to roll back to.
ALTER TABLE sandboxes ADD COLUMN prior_state TEXT;
CREATE INDEX sandboxes_by_state ON sandboxes (state);

CREATE INDEX operations_by_sandbox ON operations (sandbox_id, created_at DESC);
CREATE INDEX operations_by_created ON operations (created_at DESC);
CREATE INDEX operations_by_state ON operations (state);

-- Lifecycle events; `seq` only grows and is never reused (AUTOINCREMENT).
CREATE TABLE events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    time          TEXT NOT NULL,
    type          TEXT NOT NULL,
    sandbox_id    TEXT NOT NULL,
    operation_id  TEXT,
    reason        TEXT
);
CREATE INDEX events_by_time ON events (time);
