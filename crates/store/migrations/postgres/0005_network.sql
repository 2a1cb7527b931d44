-- Cove store schema v2 (PostgreSQL): sandbox networks. `network` is the egress policy (JSON
-- `{internet, allow, deny}`), `secrets` the secrets' public part (JSON `{NAME: {hosts}}`),
-- `secrets_sealed` their values sealed with the server's key (never in clear); events name
-- the destination a gateway refused (`network.denied`).
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{"internet":true,"allow":[],"deny":[]}';
ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sandboxes ADD COLUMN secrets_sealed TEXT;
ALTER TABLE events ADD COLUMN destination TEXT;
