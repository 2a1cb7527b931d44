-- Cove store schema (PostgreSQL): public sandbox ports. `public` lets requests reach the
-- sandbox's ports without a credential (`PUT /v1/sandboxes/{id}/ports`).
ALTER TABLE sandboxes ADD COLUMN public BOOLEAN NOT NULL DEFAULT FALSE;
