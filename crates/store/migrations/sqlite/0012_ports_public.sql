-- Cove store schema (SQLite): public sandbox ports. `public` = 1 lets requests reach the
-- sandbox's ports without a credential (`PUT /v1/sandboxes/{id}/ports`).
ALTER TABLE sandboxes ADD COLUMN public INTEGER NOT NULL DEFAULT 0;
