// Package inboxhandler joins a [worker.Worker] to an [inbox.Inbox]: each message's work runs in
// the inbox's transaction, once per event key and handler name, and the worker deletes the
// message only after that transaction committed.
//
// # Keys
//
// [DefaultKey] takes the event key from the message attribute "event_id", else from the body's
// top-level JSON field "id". A message with neither, or with an invalid key, fails like any
// error: it is retried and then dead-lettered, never processed without a key and never silently
// dropped. [KeyFromMessageID] is a documented fallback only: a producer's retry or a DLQ redrive
// gives the same event a new MessageId. [KeyFromBody] hashes the raw bytes as received.
//
// # Results
//
// A fresh event runs the function and commits; a duplicate returns [worker.ErrDuplicate] (the
// worker deletes it and counts it). A commit whose outcome is unknown ([inbox.ErrCommitUnknown])
// and a database that cannot be reached return [worker.Unavailable]: the message is not deleted
// (its redelivery settles it: a duplicate if it committed) and the worker pauses its pollers.
//
// # Start-up checks
//
// [Handler] implements [worker.QueueChecker]: at start the worker has it check that the inbox's
// schema is migrated and commits are durable ([inbox.Inbox.Check]), and that the inbox keeps rows
// at least as long as the queue (or its DLQ) can redeliver ([inbox.Inbox.CheckRetention]).
package inboxhandler
