-- Why a message failed, for an operator (`sqsinbox events show`, the DLQ peek and the console):
-- one row per failed attempt of a handler, written after the attempt's transaction rolled back,
-- in a statement of its own. The newest few per (handler, event) are kept (the write trims the
-- older ones), and the inbox's purge deletes rows older than its retention. event_id is NULL
-- when the message had no valid key; such rows are kept per message instead. The queue and the
-- instance are the attempt's inbox_sources row, as in processed_messages.
CREATE TABLE {{schema}}.inbox_failures (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    handler       text        NOT NULL,
    event_id      text,
    message_id    text        NOT NULL,
    source        integer,
    receive_count integer,
    error         text        NOT NULL,
    failed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_failures_event_idx ON {{schema}}.inbox_failures (event_id, handler);
CREATE INDEX inbox_failures_message_idx ON {{schema}}.inbox_failures (message_id);
CREATE INDEX inbox_failures_failed_at_idx ON {{schema}}.inbox_failures (failed_at);

-- Messages an operator deleted from a dead-letter queue (`sqsinbox dlq discard`, the console's
-- discard): who, why, and what was thrown away. Kept until dropped by hand: an audit record.
CREATE TABLE {{schema}}.dlq_discards (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text        NOT NULL,
    message_id    text        NOT NULL,
    event_id      text,
    body_sha256   bytea       NOT NULL CHECK (octet_length(body_sha256) = 32),
    discarded_by  text        NOT NULL CHECK (discarded_by <> ''),
    reason        text        NOT NULL CHECK (reason <> ''),
    forced        boolean     NOT NULL,
    discarded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dlq_discards_message_idx ON {{schema}}.dlq_discards (message_id);
