-- Which layout the inbox's rows are in. 'table' is processed_messages, purged by DELETE.
-- 'generations' is processed_events, partitioned by a generation number (the claim time divided by
-- generation_seconds), forgotten a whole generation at a time; `sqsinbox inbox layout generations`
-- switches to it. legacy: the rows of the table layout from before the switch are still in
-- processed_messages_legacy, which claims probe too until the purge has emptied and dropped it.
-- One row.
CREATE TABLE {{schema}}.inbox_layout (
    one                boolean     PRIMARY KEY DEFAULT true CHECK (one),
    kind               text        NOT NULL DEFAULT 'table' CHECK (kind IN ('table', 'generations')),
    generation_seconds integer     CHECK (generation_seconds > 0),
    switched_at        timestamptz,
    legacy             boolean     NOT NULL DEFAULT false,
    CHECK ((kind = 'generations') = (generation_seconds IS NOT NULL))
);
INSERT INTO {{schema}}.inbox_layout DEFAULT VALUES;
