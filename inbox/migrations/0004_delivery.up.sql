-- Where each processed event came from, for an operator's lookup (`sqsinbox events show`): the
-- SQS message, its queue and receive count, the worker instance and the trace. Each row records
-- them in 4 small columns (about 40 bytes); the queue and instance, which repeat on every row, are
-- kept once in inbox_sources and referred to by id. The columns are nullable with no default, so
-- adding them rewrites nothing, and rows written before (or by a binary that does not fill them)
-- simply have none.
CREATE TABLE {{schema}}.inbox_sources (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue      text        NOT NULL,
    instance   text        NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue, instance)
);

ALTER TABLE {{schema}}.processed_messages
    ADD COLUMN source        integer,
    ADD COLUMN message_id    uuid,
    ADD COLUMN receive_count smallint,
    ADD COLUMN trace_id      bytea;
