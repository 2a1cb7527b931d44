-- Cove store schema (SQLite): persistent volumes, and the volumes each sandbox mounts (a JSON
-- list of {name, path, read_only}).
CREATE TABLE volumes (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL,
    name        TEXT NOT NULL,
    size_mib    INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (org, name)
);

ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
