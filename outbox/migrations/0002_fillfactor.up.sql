-- Room on every page for a second version of each row, so that the relay's claim (which sets
-- only the lease columns, in no index) updates a row in place: a heap-only update, with no new
-- index entries. Pages written before this keep their rows packed; new rows get the room.
ALTER TABLE {{schema}}.outbox_messages SET (fillfactor = 50);
