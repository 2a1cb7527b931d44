-- Cove store schema (SQLite): volumes kept in the snapshot store (`storage` 'object'): the
-- generation of their last upload (0: never uploaded, an empty filesystem) and whether a node
-- holds them now (`attached`; `node` names it, NULL for the server's own node). A local volume
-- is always attached to its node.
ALTER TABLE volumes ADD COLUMN storage TEXT NOT NULL DEFAULT 'local';
ALTER TABLE volumes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE volumes ADD COLUMN attached INTEGER NOT NULL DEFAULT 1;
