DO $$
BEGIN
    IF (SELECT kind FROM {{schema}}.inbox_layout) = 'generations' THEN
        RAISE EXCEPTION 'the inbox is in the generations layout (processed_events): reverting 0005 would leave it unreadable; drop the schema instead';
    END IF;
END
$$;
DROP TABLE {{schema}}.inbox_layout;
