-- Cove store schema v4 (SQLite): command creates honour `Idempotency-Key` (kept as long as the
-- command row), and rows outlive a restart of the sandbox's processes as markers.
ALTER TABLE commands ADD COLUMN idempotency_key TEXT;
ALTER TABLE commands ADD COLUMN request_hash TEXT;
ALTER TABLE commands ADD COLUMN guest_restarted INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX commands_by_key ON commands (sandbox_id, idempotency_key);
