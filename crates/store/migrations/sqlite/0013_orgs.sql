-- Cove store schema (SQLite): orgs, their API keys (SHA-256 hashes only) and quotas, the
-- audit log, and the org every sandbox, operation, checkpoint, pool and file template belongs
-- to. Rows from before orgs belong to the built-in org `default` (the admin token's org).
CREATE TABLE orgs (
    id                 TEXT PRIMARY KEY,
    created_at         TEXT NOT NULL,
    -- Quotas; NULL is unlimited.
    max_running        INTEGER,
    max_vcpus          INTEGER,
    max_memory_mib     INTEGER,
    max_creates_per_s  INTEGER
);
INSERT INTO orgs (id, created_at) VALUES ('default', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL REFERENCES orgs (id),
    name        TEXT NOT NULL,
    prefix      TEXT NOT NULL,
    key_hash    TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE INDEX api_keys_by_org ON api_keys (org, created_at);

CREATE TABLE audit (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    time        TEXT NOT NULL,
    org         TEXT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    resource    TEXT,
    status      INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    request_id  TEXT
);
CREATE INDEX audit_by_org ON audit (org, seq);
CREATE INDEX audit_by_time ON audit (time);

ALTER TABLE sandboxes ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX sandboxes_by_org ON sandboxes (org, state);
ALTER TABLE operations ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX operations_by_org ON operations (org, created_at);
-- Idempotency keys are per org: one org's key never answers with another org's operation.
DROP INDEX operations_by_idempotency_key;
CREATE UNIQUE INDEX operations_by_idempotency_key ON operations (org, kind, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
ALTER TABLE checkpoints ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
ALTER TABLE pools ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
ALTER TABLE file_templates ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
