-- Cove store schema v2 (PostgreSQL): command creates honour `Idempotency-Key` (kept as long as
-- the command row), and rows outlive a restart of the sandbox's processes as markers.
ALTER TABLE commands ADD COLUMN idempotency_key TEXT;
ALTER TABLE commands ADD COLUMN request_hash TEXT;
ALTER TABLE commands ADD COLUMN guest_restarted BOOLEAN NOT NULL DEFAULT FALSE;
CREATE UNIQUE INDEX commands_by_key ON commands (sandbox_id, idempotency_key);
