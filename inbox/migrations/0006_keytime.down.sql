DO $$
BEGIN
    IF (SELECT kind FROM {{schema}}.inbox_layout) = 'keytime' THEN
        RAISE EXCEPTION 'the inbox is in the keytime layout (processed_events routed by the keys'' time): reverting 0006 would leave it unreadable; drop the schema instead';
    END IF;
END
$$;
ALTER TABLE {{schema}}.inbox_layout
    DROP CONSTRAINT inbox_layout_kind_check,
    ADD CONSTRAINT inbox_layout_kind_check CHECK (kind IN ('table', 'generations')),
    DROP CONSTRAINT inbox_layout_check,
    ADD CONSTRAINT inbox_layout_check CHECK ((kind = 'generations') = (generation_seconds IS NOT NULL));
