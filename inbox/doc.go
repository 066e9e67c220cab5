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
// # What a function's behaviour leads to
//
// [Inbox.Run] (one transaction per event) and [Inbox.RunBatch] (a savepoint per event, one
// COMMIT) follow one table, item for item. The function gets a wrapped transaction that records
// what it does with it (each failed statement's SQLSTATE, an ended statement context, rows left
// open, Commit and Rollback), and the outcome is decided from that record and the connection's
// own state, never from the error the function returns, which it may swallow or wrap without %w.
//
//	the function...                        | its event                                   | the batch's other events            | a worker
//	---------------------------------------+---------------------------------------------+-------------------------------------+---------
//	returns nil                            | commits with its claim: Processed           | commit                              | runs on
//	returns an error                       | rolled back, claim included: that error     | commit                              | runs on
//	returns nil after a failed statement   | as an error: *TxAbortedError (ErrTxAborted) | commit                              | runs on
//	  (transaction aborted, 25P02)         |   naming the SQLSTATE that aborted it       |                                     |
//	returns with Rows or batch results     | closed by the inbox; fails with ErrRowsOpen | commit, or run again unfailed on a  | runs on
//	  still open                           |                                             |   fresh connection (Retries)        |
//	runs past its timeout in a statement   | fails with the timeout (ErrTimeout in a     | run again unfailed on a fresh       | runs on
//	  (pgx closes the connection)          |   batch; the caller's cause for Run)        |   connection (Retries)              |
//	returns nil after its timeout          | fails with the timeout                      | commit                              | runs on
//	calls tx.Commit()                      | nothing happens yet: the inbox commits it   | commit                              | runs on
//	                                       |   with its claim (later statements get      |                                     |
//	                                       |   pgx.ErrTxClosed; a deferred Rollback is   |                                     |
//	                                       |   a no-op, as in pgx)                       |                                     |
//	calls tx.Rollback()                    | fails with ErrItemRolledBack                | commit                              | runs on
//	panics                                 | fails with a *PanicError (the stack)        | commit                              | runs on
//	meets a broken deployment (42P01,      | *DeploymentError (ErrBrokenDeployment)      | not run: ErrBatchStopped, nothing   | pauses
//	  42703, 42883, 42704, 42501, 3F000),  |                                             |   of the batch commits              |
//	  or the inbox's own claim does        |                                             |                                     |
//
// Commit does nothing rather than fail because the usual pgx idiom (defer tx.Rollback; ...;
// return tx.Commit) is then correct as it stands, and because the work cannot commit without its
// claim: the inbox's COMMIT is the one that counts. A worker (through the inbox handler) retries
// a failed event after its backoff and dead-letters it at the queue's maxReceiveCount; a broken
// deployment pauses it instead, without counting a failure (worker.BrokenDeployment). A deadlock
// or serialization failure rolls a batch back and runs it again; Run returns it as an error.
//
// Statements sent through tx.Conn() or tx.LargeObjects() go around the record: the connection's
// state still shows an aborted transaction or a busy connection, but not the SQLSTATE.
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
// The tables (processed_messages, inbox_sources, and idempotency_keys for the HTTP middleware in
// [github.com/sqsinbox/sqsinbox/inbox/idempotency]) live in a schema of their own ([DefaultSchema] unless Config.Schema says otherwise)
// and are created only by [Migrate] (or `sqsinbox migrate up`), never on first use.
// [Inbox.Check] refuses to start on an unmigrated schema.
//
// A row of processed_messages holds, besides the handler, the key and the claim's time, the
// [Delivery] that applied the event (SQS message id, receive count, trace id, and the queue and
// worker instance through a small id into inbox_sources, where each pair is stored once): about
// 40 bytes more per row, for [Inbox.Lookup] and [Inbox.List].
//
// inbox_routes holds, one row a queue, the routes a worker's inboxhandler.Router published when
// it started, or the name of its one inboxhandler.Handler ([Inbox.PublishRoutes]), versioned, with
// the version they replaced: operator tools classify a dead-letter queue's messages by them
// ([Inbox.PublishedRoutes]).
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
