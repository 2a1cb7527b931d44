-- Cove store schema (SQLite): per-org feature gates and checkpoint retention.
-- `disabled_features` is a comma-separated list of feature names ('' for none); a NULL limit
-- is no limit.
ALTER TABLE orgs ADD COLUMN disabled_features TEXT NOT NULL DEFAULT '';
ALTER TABLE orgs ADD COLUMN checkpoint_max_per_sandbox INTEGER;
ALTER TABLE orgs ADD COLUMN checkpoint_max_age_s INTEGER;
