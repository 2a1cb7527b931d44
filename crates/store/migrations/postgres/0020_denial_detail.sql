-- `network.denied` events name the host and port a sandbox tried and the rule that refused it.
ALTER TABLE events ADD COLUMN host TEXT;
ALTER TABLE events ADD COLUMN port INTEGER;
ALTER TABLE events ADD COLUMN rule TEXT;
