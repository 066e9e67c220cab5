-- Points per customer. `points = points + 50` stacks on itself: only the inbox makes a second
-- delivery of the same OrderPaid harmless.
CREATE TABLE {{schema}}.loyalty_accounts (
    customer_id text        PRIMARY KEY,
    points      bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
