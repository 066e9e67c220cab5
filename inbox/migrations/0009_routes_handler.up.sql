-- A queue whose worker runs one inboxhandler.Handler (not a Router) publishes that handler's name:
-- every message of the queue goes to it, whatever its type. routes is then {} and the type columns
-- are empty; a Router's row has handler ''. Part of the version hash, like the rest.
ALTER TABLE {{schema}}.inbox_routes ADD COLUMN handler text NOT NULL DEFAULT '';
