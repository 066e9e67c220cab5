-- The claim reads the unsent rows of standard destinations in id order, and a FIFO group's head
-- through outbox_messages_group_idx. Ordered by fifo first, the standard rows are one range of
-- this index, which a claim no longer reads through every unsent FIFO row before them: in a FIFO
-- backlog, those rows are most of the table's unsent ones, and each cost the claim a probe.
CREATE INDEX outbox_messages_unsent_kind_idx ON {{schema}}.outbox_messages (fifo, id) WHERE sent_at IS NULL;
DROP INDEX {{schema}}.outbox_messages_unsent_idx;
