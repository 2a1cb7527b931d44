-- Cove store schema (SQLite): checkpoints of sandboxes (their bytes are in the snapshot store).
CREATE TABLE checkpoints (
    id           TEXT PRIMARY KEY,
    sandbox_id   TEXT NOT NULL,
    name         TEXT,
    state        TEXT NOT NULL,
    state_reason TEXT,
    template     TEXT NOT NULL,
    release      INTEGER NOT NULL,
    vcpus        INTEGER NOT NULL,
    memory_mib   INTEGER NOT NULL,
    pids_max     INTEGER NOT NULL,
    disk_mib     INTEGER,
    env          TEXT NOT NULL,
    cwd          TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    runtime      TEXT NOT NULL,
    memory       INTEGER NOT NULL DEFAULT 0,
    file_bytes   INTEGER NOT NULL DEFAULT 0,
    operation_id TEXT,
    pause_ms     INTEGER,
    created_at   TEXT NOT NULL
);
CREATE INDEX checkpoints_by_sandbox ON checkpoints (sandbox_id, created_at);
