DROP TABLE {{schema}}.outbox_messages;
DROP FUNCTION {{schema}}.outbox_notify();
