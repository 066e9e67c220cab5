-- Each stored key carries its own expiry: now() + the TTL of the middleware that stored it, by
-- the database's clock. The purge deletes by it, so a middleware with a 72-hour TTL keeps its
-- keys 72 hours whatever TTL the purging process assumes.
ALTER TABLE {{schema}}.idempotency_keys ADD COLUMN expires_at timestamptz;

-- Rows stored before this migration were kept 24 hours (the default and minimum TTL).
UPDATE {{schema}}.idempotency_keys SET expires_at = created_at + interval '24 hours';

-- A middleware from before this migration does not set the column: its rows get the minimum TTL.
ALTER TABLE {{schema}}.idempotency_keys
    ALTER COLUMN expires_at SET DEFAULT now() + interval '24 hours',
    ALTER COLUMN expires_at SET NOT NULL;

-- The purge deletes by expiry; this index keeps it from scanning the table.
CREATE INDEX idempotency_keys_expires_at_idx ON {{schema}}.idempotency_keys (expires_at);
