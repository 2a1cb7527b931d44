-- Cove store schema v8 (PostgreSQL): templates built from a file, and the defaults each
-- release built from one gives its sandboxes (JSON: user, workdir, env, start, ready).
CREATE TABLE file_templates (
    name TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE releases ADD COLUMN defaults TEXT;
