-- The inbox: one row per (handler, event) whose effect has committed.
CREATE TABLE {{schema}}.processed_messages (
    handler  text        NOT NULL,
    event_id text        NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, event_id)
);

-- The purge deletes by age; this index keeps it from scanning the table.
CREATE INDEX processed_messages_seen_at_idx ON {{schema}}.processed_messages (seen_at);
