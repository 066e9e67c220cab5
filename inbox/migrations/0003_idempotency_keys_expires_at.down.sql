-- The keys stay; each one's own expiry is lost (0003 applied again sets created_at + 24 hours).
DROP INDEX {{schema}}.idempotency_keys_expires_at_idx;
ALTER TABLE {{schema}}.idempotency_keys DROP COLUMN expires_at;
