DROP TABLE {{schema}}.idempotency_keys;
