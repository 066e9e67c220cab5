// Package handlertest tests a user's inbox handler the way the worker runs it, through the real
// inbox code path and a real PostgreSQL database, and reports what each delivery came to as an
// [Outcome]: what the worker would do with the message. A handler test is then a few lines, and
// asserts the user's own tables:
//
//	db := inboxtest.New(t, inboxtest.WithSQL(`CREATE TABLE pick_tasks (order_id text NOT NULL)`))
//	h, _ := inboxhandler.New(db.Inbox, "warehouse", nil, pick)
//	outs := handlertest.Deliver(t, h, handlertest.Message(`{"id":"evt_9f3k","order_id":"o-1"}`), 5)
//	// outs: processed, duplicate, duplicate, duplicate, duplicate; and one pick task in the table
//
// It needs no SQS server: the worker's side of a delivery (receive, lease, delete) adds nothing
// the handler can observe. The database fixture is [github.com/sqsinbox/sqsinbox/inbox/inboxtest].
//
// # The worker's paths
//
// A handler that implements [worker.BatchHandler] (the inbox handler does) is run by the worker
// through HandleBatch, in batches of up to 10 messages by default; a plain [worker.Handler] through
// Handle, one message at a time. The deliveries here take the same path the worker would, through
// [worker.RunBatch] (the worker's batch less its SQS side):
//
//   - [Deliver] redelivers one message n times, one after another, each as a batch of one;
//   - [DeliverBatch] delivers several messages in one batch (for the inbox handler: one
//     transaction, a savepoint each), as the worker does with the messages it holds at once;
//   - [DeliverConcurrently] delivers several batches at once, as two pods that received the same
//     event would.
//
// Messages with a GroupID keep the worker's FIFO rule inside a batch: once a message of a group is
// not done, the later ones of its group are not run ([Released]).
//
// Each message's work is bounded by a handler timeout, the worker's default
// ([DefaultHandlerTimeout]) unless a [Config] says otherwise.
package handlertest
