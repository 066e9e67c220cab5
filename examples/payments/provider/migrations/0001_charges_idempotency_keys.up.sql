-- The provider's side: the charges it made, and the responses it gave per Idempotency-Key.
CREATE TABLE {{schema}}.charges (
    id          text        PRIMARY KEY,
    order_id    text        NOT NULL,
    customer_id text        NOT NULL,
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE {{schema}}.idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL,
    status       integer     NOT NULL,
    response     bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
