DROP TABLE {{schema}}.idempotency_keys;
DROP TABLE {{schema}}.charges;
