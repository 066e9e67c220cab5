ALTER TABLE {{schema}}.outbox_messages RESET (fillfactor);
