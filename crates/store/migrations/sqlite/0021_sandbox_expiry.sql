-- Cove store schema (SQLite): when a sandbox expires and what its expiry does (`delete` or
-- `suspend`). Cove's TTL and E2B's timeout both live here; a sandbox with a TTL expires at
-- `created_at + ttl_s` (the old TTL rows get it here, as the controller used to compute it).
ALTER TABLE sandboxes ADD COLUMN expires_at TEXT;
ALTER TABLE sandboxes ADD COLUMN on_expiry TEXT NOT NULL DEFAULT 'delete';
UPDATE sandboxes SET expires_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', created_at, '+' || ttl_s || ' seconds')
    WHERE ttl_s IS NOT NULL AND state NOT IN ('deleting', 'deleted');
CREATE INDEX sandboxes_by_expiry ON sandboxes (expires_at) WHERE expires_at IS NOT NULL;
-- Sandboxes created through E2B before this kept their timeout in a replica's memory, which a
-- restart reset to E2B's default: they get that default (300 s from now) here, suspending
-- those created with `autoPause` (their hidden `cove.e2b` marker says `"onTimeout":"pause"`).
UPDATE sandboxes SET
    expires_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+300 seconds'),
    on_expiry = CASE WHEN json_extract(metadata, '$."cove.e2b"') LIKE '%"onTimeout":"pause"%'
                     THEN 'suspend' ELSE 'delete' END
    WHERE expires_at IS NULL AND state IN ('creating', 'running')
      AND json_extract(metadata, '$."cove.e2b"') IS NOT NULL;
