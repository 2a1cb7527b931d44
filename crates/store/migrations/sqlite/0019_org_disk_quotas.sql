-- Cove store schema (SQLite): quotas on sandboxes in any state but `deleted` and on disk (the
-- sandboxes' own disks and the org's volumes). A NULL limit is no limit.
ALTER TABLE orgs ADD COLUMN max_sandboxes INTEGER;
ALTER TABLE orgs ADD COLUMN max_disk_mib INTEGER;
