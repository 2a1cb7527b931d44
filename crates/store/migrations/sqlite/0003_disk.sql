-- Cove store schema v3 (SQLite): the size of a sandbox's own disk (NULL = none).
ALTER TABLE sandboxes ADD COLUMN disk_mib INTEGER;
