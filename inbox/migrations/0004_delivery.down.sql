ALTER TABLE {{schema}}.processed_messages
    DROP COLUMN source,
    DROP COLUMN message_id,
    DROP COLUMN receive_count,
    DROP COLUMN trace_id;
DROP TABLE {{schema}}.inbox_sources;
