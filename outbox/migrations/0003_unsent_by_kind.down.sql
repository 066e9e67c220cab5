CREATE INDEX outbox_messages_unsent_idx ON {{schema}}.outbox_messages (id) WHERE sent_at IS NULL;
DROP INDEX {{schema}}.outbox_messages_unsent_kind_idx;
