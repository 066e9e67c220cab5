-- The ledger worker's table: one row per PaymentCaptured it books, written in the inbox's
-- transaction. No unique key on payment_id, on purpose: the inbox alone keeps a redelivered or
-- republished event from booking twice, and the tests count the rows to show it.
CREATE TABLE {{schema}}.ledger (
    id         bigserial   PRIMARY KEY,
    payment_id bigint      NOT NULL,
    event_id   text        NOT NULL,
    client_id  text        NOT NULL,
    amount     bigint      NOT NULL,
    currency   text        NOT NULL,
    booked_at  timestamptz NOT NULL DEFAULT now()
);
