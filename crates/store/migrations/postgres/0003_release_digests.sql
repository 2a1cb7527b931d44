-- Cove store schema v3 (PostgreSQL): a release's content digest, and the digest each sandbox runs.
ALTER TABLE releases ADD COLUMN digest TEXT;
ALTER TABLE sandboxes ADD COLUMN release_digest TEXT;
