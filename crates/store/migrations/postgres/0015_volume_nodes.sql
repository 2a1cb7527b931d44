-- Cove store schema (PostgreSQL): the node that keeps each volume's image (a node name; NULL
-- for a volume of the server's own in-process node, and for every volume made before this
-- column).
ALTER TABLE volumes ADD COLUMN node TEXT;
