-- Cove store schema v8 (PostgreSQL): templates built from a file, and the defaults each
-- release built from one gives its sandboxes (JSON: user, workdir, env, start, ready).
CREATE TABLE file_templates (
    name TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE releases ADD COLUMN defaults TEXT;
-- The operation that built a release (its log is the build log).
ALTER TABLE releases ADD COLUMN build_operation_id TEXT;
