-- The charges the shop made at the provider, recorded in the inbox's transaction.
CREATE TABLE {{schema}}.charges (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   text        NOT NULL,
    event_id   text        NOT NULL,
    charge_id  text        NOT NULL,
    amount     bigint      NOT NULL,
    currency   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX charges_order_id_idx ON {{schema}}.charges (order_id);
