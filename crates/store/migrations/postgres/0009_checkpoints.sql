-- Cove store schema (PostgreSQL): checkpoints of sandboxes (their bytes are in the snapshot store).
CREATE TABLE checkpoints (
    id           TEXT PRIMARY KEY,
    sandbox_id   TEXT NOT NULL,
    name         TEXT,
    state        TEXT NOT NULL,
    state_reason TEXT,
    template     TEXT NOT NULL,
    release      BIGINT NOT NULL,
    vcpus        BIGINT NOT NULL,
    memory_mib   BIGINT NOT NULL,
    pids_max     BIGINT NOT NULL,
    disk_mib     BIGINT,
    env          TEXT NOT NULL,
    cwd          TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    runtime      TEXT NOT NULL,
    memory       BOOLEAN NOT NULL DEFAULT FALSE,
    file_bytes   BIGINT NOT NULL DEFAULT 0,
    operation_id TEXT,
    pause_ms     BIGINT,
    created_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX checkpoints_by_sandbox ON checkpoints (sandbox_id, created_at);
