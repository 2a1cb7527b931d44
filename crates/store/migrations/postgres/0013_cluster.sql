-- Cove store schema (PostgreSQL): the shared node registry (nodes, where sandboxes are
-- placed), the node link's TLS identity, and operation leases (the replica running an
-- operation and until when its claim holds).
CREATE TABLE nodes (
    name               TEXT PRIMARY KEY,
    address            TEXT NOT NULL,
    certificate        BYTEA NOT NULL,
    report             TEXT NOT NULL,
    state              TEXT NOT NULL,
    reason             TEXT,
    last_heartbeat_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE placements (
    sandbox_id  TEXT PRIMARY KEY,
    node        TEXT NOT NULL,
    vcpus       BIGINT NOT NULL,
    memory_mib  BIGINT NOT NULL
);

CREATE TABLE cluster_identity (
    name         TEXT PRIMARY KEY,
    certificate  TEXT NOT NULL,
    private_key  TEXT NOT NULL
);

ALTER TABLE operations ADD COLUMN owner TEXT;
ALTER TABLE operations ADD COLUMN lease_until TIMESTAMPTZ;
CREATE INDEX operations_unfinished ON operations (state) WHERE state IN ('pending', 'running');
