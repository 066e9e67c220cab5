-- The outbox: one row per event to publish, written in the producer's own transaction and
-- published afterwards by the relay.
CREATE TABLE {{schema}}.outbox_messages (
    id              bigserial   PRIMARY KEY,
    event_id        text        NOT NULL,
    -- 'sqs' (a queue URL) or 'sns' (a topic ARN); fifo when the name ends in .fifo.
    kind            text        NOT NULL CHECK (kind IN ('sqs', 'sns')),
    destination     text        NOT NULL,
    fifo            boolean     NOT NULL,
    body            text        NOT NULL,
    -- {"name": {"DataType": ..., "StringValue": ...} or {"DataType": ..., "BinaryValue": base64}}
    attributes      jsonb       NOT NULL DEFAULT '{}',
    group_id        text,
    dedup_id        text,
    delay_seconds   integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- The earliest time of the next attempt (moved forward by the backoff after a failure).
    available_at    timestamptz NOT NULL DEFAULT now(),
    -- The lease of the relay that claimed the row: no transaction stays open while it publishes.
    claimed_until   timestamptz,
    lease_token     text,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    sent_at         timestamptz,
    parked_at       timestamptz,
    UNIQUE (destination, event_id)
);

-- The relay's claim reads only unsent rows.
CREATE INDEX outbox_messages_unsent_idx ON {{schema}}.outbox_messages (id) WHERE sent_at IS NULL;
-- A FIFO row may go only when no earlier row of its group is unsent.
CREATE INDEX outbox_messages_group_idx ON {{schema}}.outbox_messages (destination, group_id, id)
    WHERE sent_at IS NULL AND fifo;
-- The purge deletes sent rows by age.
CREATE INDEX outbox_messages_sent_at_idx ON {{schema}}.outbox_messages (sent_at);

-- Wakes the relays on commit (NOTIFY is delivered at commit, and only if the transaction
-- commits). The payload names the schema, so relays of other schemas ignore it.
CREATE FUNCTION {{schema}}.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sqsinbox_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_messages_notify AFTER INSERT ON {{schema}}.outbox_messages
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_notify();
