-- The keytime layout: processed_events as in 'generations', with the keys that carry their time
-- (UUIDv7, ULID) routed to the generation of that time (`sqsinbox inbox layout keytime`). A binary
-- from before it reads an unknown kind as the table layout and finds processed_messages gone: it
-- refuses to claim, where one that knew only 'generations' would claim without the routing.
ALTER TABLE {{schema}}.inbox_layout
    DROP CONSTRAINT inbox_layout_kind_check,
    ADD CONSTRAINT inbox_layout_kind_check CHECK (kind IN ('table', 'generations', 'keytime')),
    DROP CONSTRAINT inbox_layout_check,
    ADD CONSTRAINT inbox_layout_check CHECK ((kind <> 'table') = (generation_seconds IS NOT NULL));
