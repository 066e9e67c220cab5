-- What each queue's inboxhandler.Router routes, as a worker published it at its last start: where
-- a message's type is read (an attribute, else a top-level field of the JSON body; type_func when a
-- function of the program's reads it), each routed type's handler (routes: {"TYPE": "HANDLER"}),
-- and what a type with no route gets. `sqsinbox redrive` and the console classify a dead-letter
-- queue's messages by it, so that nobody retypes the routes. version is a hash of all of that: a
-- start that publishes the same version only sets confirmed_at (and instance); one that publishes
-- another keeps the row it replaces in previous (its columns as JSON), so a deploy that changed
-- the routes shows. One row a queue, written by one statement at each worker start.
CREATE TABLE {{schema}}.inbox_routes (
    queue          text        PRIMARY KEY,
    version        text        NOT NULL,
    type_attribute text        NOT NULL,
    type_field     text        NOT NULL,
    type_func      boolean     NOT NULL,
    unknown        text        NOT NULL,
    routes         jsonb       NOT NULL,
    instance       text        NOT NULL,
    published_at   timestamptz NOT NULL DEFAULT now(),
    confirmed_at   timestamptz NOT NULL DEFAULT now(),
    previous       jsonb
);
