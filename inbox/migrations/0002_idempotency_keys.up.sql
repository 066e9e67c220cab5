-- HTTP Idempotency-Key: one row per (client, key) whose response has been stored.
-- A row is inserted uncommitted by the first attempt, in the transaction that runs the handler,
-- and committed only together with the handler's writes and the response. So every committed
-- row holds a response; an attempt in flight is an uncommitted row that concurrent retries wait
-- on for a bounded time (lock_timeout) and then answer 409.
CREATE TABLE {{schema}}.idempotency_keys (
    -- SHA-256 of the length-prefixed (principal, key): the raw key is never stored.
    key_hash    bytea       NOT NULL PRIMARY KEY CHECK (octet_length(key_hash) = 32),
    -- SHA-256 of the length-prefixed (method, route, SHA-256 of the body).
    fingerprint bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    -- The stored response; NULL only while the row is uncommitted.
    status      smallint    CHECK (status BETWEEN 100 AND 599),
    headers     jsonb,
    body        bytea,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The purge deletes by age; this index keeps it from scanning the table.
CREATE INDEX idempotency_keys_created_at_idx ON {{schema}}.idempotency_keys (created_at);
