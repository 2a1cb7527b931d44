-- Cove store schema (SQLite): the shared node registry (nodes, where sandboxes are placed), the
-- node link's TLS identity, and operation leases (the replica running an operation and until
-- when its claim holds).
CREATE TABLE nodes (
    name               TEXT PRIMARY KEY,
    address            TEXT NOT NULL,
    certificate        BLOB NOT NULL,
    report             TEXT NOT NULL,
    state              TEXT NOT NULL,
    reason             TEXT,
    last_heartbeat_at  TEXT NOT NULL
);

CREATE TABLE placements (
    sandbox_id  TEXT PRIMARY KEY,
    node        TEXT NOT NULL,
    vcpus       INTEGER NOT NULL,
    memory_mib  INTEGER NOT NULL
);

CREATE TABLE cluster_identity (
    name         TEXT PRIMARY KEY,
    certificate  TEXT NOT NULL,
    private_key  TEXT NOT NULL
);

ALTER TABLE operations ADD COLUMN owner TEXT;
ALTER TABLE operations ADD COLUMN lease_until TEXT;
