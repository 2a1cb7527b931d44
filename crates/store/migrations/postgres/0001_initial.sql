-- Cove store schema v1 (PostgreSQL): the same tables as SQLite's migrations 0001..0003, with
-- native types (TIMESTAMPTZ, BIGINT, BOOLEAN). JSON columns hold objects as text.
CREATE TABLE tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE releases (
    template     TEXT NOT NULL,
    number       BIGINT NOT NULL,
    state        TEXT NOT NULL,
    size_bytes   BIGINT,
    recipe_hash  TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (template, number)
);

CREATE TABLE sandboxes (
    id                TEXT PRIMARY KEY,
    template          TEXT NOT NULL,
    release           BIGINT NOT NULL,
    state             TEXT NOT NULL,
    state_reason      TEXT,
    runtime           TEXT NOT NULL,
    vcpus             BIGINT NOT NULL,
    memory_mib        BIGINT NOT NULL,
    pids_max          BIGINT NOT NULL,
    disk_mib          BIGINT,
    env               TEXT NOT NULL,
    metadata          TEXT NOT NULL,
    cwd               TEXT NOT NULL,
    user_name         TEXT NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    idle_timeout_s    BIGINT NOT NULL DEFAULT 21600,
    ttl_s             BIGINT,
    last_activity_at  TIMESTAMPTZ,
    memory_restored   BOOLEAN,
    -- The state a sandbox was in before `suspending` or `deleting`, to roll back to.
    prior_state       TEXT
);
CREATE INDEX sandboxes_by_created ON sandboxes (created_at DESC, id DESC);
CREATE INDEX sandboxes_by_state ON sandboxes (state);

CREATE TABLE operations (
    id               TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    state            TEXT NOT NULL,
    sandbox_id       TEXT,
    template         TEXT,
    release          BIGINT,
    progress         BIGINT,
    error_code       TEXT,
    error_message    TEXT,
    idempotency_key  TEXT,
    request_hash     TEXT,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    deadline         TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX operations_by_idempotency_key ON operations (kind, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX operations_by_sandbox ON operations (sandbox_id, created_at DESC);
CREATE INDEX operations_by_created ON operations (created_at DESC);
CREATE INDEX operations_by_state ON operations (state);

CREATE TABLE operation_logs (
    operation_id  TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    line          TEXT NOT NULL,
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE commands (
    id                     TEXT PRIMARY KEY,
    sandbox_id             TEXT NOT NULL,
    attachment_token_hash  TEXT NOT NULL,
    attachment_expires_at  TIMESTAMPTZ NOT NULL,
    created_at             TIMESTAMPTZ NOT NULL
);
CREATE INDEX commands_by_sandbox ON commands (sandbox_id);

-- Lifecycle events. `seq` is taken from the one-row counter `event_seq` inside the writing
-- transaction: the row lock orders event writers, so seqs commit in order with no gaps (a
-- rolled-back write gives its number back), and a purge never resets the counter.
CREATE TABLE events (
    seq           BIGINT PRIMARY KEY,
    time          TIMESTAMPTZ NOT NULL,
    type          TEXT NOT NULL,
    sandbox_id    TEXT NOT NULL,
    operation_id  TEXT,
    reason        TEXT
);
CREATE INDEX events_by_time ON events (time);

CREATE TABLE event_seq (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    last  BIGINT NOT NULL
);
INSERT INTO event_seq (id, last) VALUES (1, 0);
