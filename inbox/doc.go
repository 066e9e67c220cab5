// Package inbox makes the processing of an event exactly once in effect, on top of a message
// system that delivers at least once, with a table in the application's own PostgreSQL database.
//
// # The idea
//
// The table processed_messages records "handler H has processed event E". [Inbox.Run] begins a
// transaction, inserts that row first (INSERT ... ON CONFLICT DO NOTHING on the primary key
// (handler, event_id)), runs the caller's function with the same transaction, and commits the
// row and the function's writes together. A second delivery of the event finds the row and
// returns [Duplicate] without running the function. Two deliveries at once are serialised by the
// primary key: the second waits for the first to commit (and is a duplicate) or roll back (and
// runs). The message may be acknowledged (deleted from SQS) only after Run returns without error.
//
// # Keys
//
// An event key must be the same on every redelivery and every producer retry. Prefer an id that
// the producer assigns (a message attribute, or a JSON field: [KeyFromJSONField]). Without one,
// [KeyFromBody] hashes the raw bytes as received. [ValidateKey] refuses empty keys, keys longer
// than [MaxKeyLen] bytes, invalid UTF-8 and NUL, with a *[KeyError]. Inside the function,
// [EventKey] and [StepKey] give the key, and derived per-step keys, to pass downstream.
//
// # Schema and migrations
//
// The tables (processed_messages, and idempotency_keys for the HTTP middleware in
// [github.com/sqsinbox/sqsinbox/inbox/idempotency]) live in a schema of their own ([DefaultSchema] unless Config.Schema says otherwise)
// and are created only by [Migrate] (or `sqsinbox migrate up`), never on first use.
// [Inbox.Check] refuses to start on an unmigrated schema.
//
// # Retention and purge
//
// A row must outlive every possible redelivery of its event, or a late redelivery runs twice.
// [Inbox.CheckRetention] compares the retention with the upstream horizon (for SQS, see
// worker.Queue.RedeliveryHorizon: up to 14 days on a standard queue, up to 28 days on a FIFO
// queue with a dead-letter queue; the default retention is 28 days, enough for any queue). [Inbox.Purge] and
// [Inbox.PurgeLoop] delete older rows in short batches, by the database's clock, on one process
// at a time (an advisory lock).
//
// # Durability
//
// With synchronous_commit = off, a commit can vanish in a crash after the message was deleted: a
// lost message. [Inbox.Check] refuses such a server unless Config.AcceptAsyncCommit is set.
package inbox
