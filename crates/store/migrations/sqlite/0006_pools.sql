-- Cove store schema v6 (SQLite): warm pools, and pool membership of sandboxes.
CREATE TABLE pools (
    name        TEXT PRIMARY KEY,
    template    TEXT NOT NULL,
    release     INTEGER,
    vcpus       INTEGER NOT NULL,
    memory_mib  INTEGER NOT NULL,
    pids_max    INTEGER NOT NULL,
    disk_mib    INTEGER,
    min_ready   INTEGER NOT NULL,
    max_members INTEGER NOT NULL,
    hits        INTEGER NOT NULL DEFAULT 0,
    misses      INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
-- The pool a sandbox is an unclaimed member of (NULL: not a member).
ALTER TABLE sandboxes ADD COLUMN pool TEXT;
-- The pool a claimed sandbox was served from.
ALTER TABLE sandboxes ADD COLUMN claimed_from TEXT;
CREATE INDEX sandboxes_by_pool ON sandboxes (pool) WHERE pool IS NOT NULL;
