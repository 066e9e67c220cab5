DROP TABLE {{schema}}.processed_messages;
