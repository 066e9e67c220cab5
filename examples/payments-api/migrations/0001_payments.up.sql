-- The example's own table. The idempotency_keys table comes from the inbox's migrations.
CREATE TABLE {{schema}}.payments (
    id         bigserial   PRIMARY KEY,
    client_id  text        NOT NULL,
    amount     bigint      NOT NULL CHECK (amount > 0),
    currency   text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
