-- Cove store schema v4 (PostgreSQL): warm pools, and pool membership of sandboxes.
CREATE TABLE pools (
    name        TEXT PRIMARY KEY,
    template    TEXT NOT NULL,
    release     BIGINT,
    vcpus       BIGINT NOT NULL,
    memory_mib  BIGINT NOT NULL,
    pids_max    BIGINT NOT NULL,
    disk_mib    BIGINT,
    min_ready   BIGINT NOT NULL,
    max_members BIGINT NOT NULL,
    hits        BIGINT NOT NULL DEFAULT 0,
    misses      BIGINT NOT NULL DEFAULT 0,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);
-- The pool a sandbox is an unclaimed member of (NULL: not a member).
ALTER TABLE sandboxes ADD COLUMN pool TEXT;
-- The pool a claimed sandbox was served from.
ALTER TABLE sandboxes ADD COLUMN claimed_from TEXT;
CREATE INDEX sandboxes_by_pool ON sandboxes (pool) WHERE pool IS NOT NULL;
