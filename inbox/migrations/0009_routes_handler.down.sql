ALTER TABLE {{schema}}.inbox_routes DROP COLUMN handler;
