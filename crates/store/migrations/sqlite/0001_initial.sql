-- Cove store schema v1 (SQLite). Times are RFC 3339 UTC text; JSON columns hold objects.
CREATE TABLE tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

CREATE TABLE releases (
    template     TEXT NOT NULL,
    number       INTEGER NOT NULL,
    state        TEXT NOT NULL,
    size_bytes   INTEGER,
    recipe_hash  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (template, number)
);

CREATE TABLE sandboxes (
    id            TEXT PRIMARY KEY,
    template      TEXT NOT NULL,
    release       INTEGER NOT NULL,
    state         TEXT NOT NULL,
    state_reason  TEXT,
    runtime       TEXT NOT NULL,
    vcpus         INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    pids_max      INTEGER NOT NULL,
    env           TEXT NOT NULL,
    metadata      TEXT NOT NULL,
    cwd           TEXT NOT NULL,
    user_name     TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX sandboxes_by_created ON sandboxes (created_at DESC, id DESC);

CREATE TABLE operations (
    id               TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    state            TEXT NOT NULL,
    sandbox_id       TEXT,
    template         TEXT,
    release          INTEGER,
    progress         INTEGER,
    error_code       TEXT,
    error_message    TEXT,
    idempotency_key  TEXT,
    request_hash     TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    deadline         TEXT NOT NULL
);
CREATE UNIQUE INDEX operations_by_idempotency_key ON operations (kind, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE operation_logs (
    operation_id  TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    line          TEXT NOT NULL,
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE commands (
    id                     TEXT PRIMARY KEY,
    sandbox_id             TEXT NOT NULL,
    attachment_token_hash  TEXT NOT NULL,
    attachment_expires_at  TEXT NOT NULL,
    created_at             TEXT NOT NULL
);
CREATE INDEX commands_by_sandbox ON commands (sandbox_id);
