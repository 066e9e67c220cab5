// Package worker receives messages from an SQS queue and runs a [Handler] on each, deleting a
// message only after its handler succeeded. It knows nothing of SQL: the inboxhandler package
// joins it to the PostgreSQL inbox, which makes the processing exactly once in effect.
//
// # Data path
//
// Pollers call ReceiveMessage (long polling, asking only for as many messages as there are free
// slots of Config.Concurrency), each message takes a slot, its handler runs with a context that
// is cancelled on timeout, lost lease or stop, and the result steers SQS:
//
//   - nil or [ErrDuplicate]: the message is deleted, in DeleteMessageBatch calls of up to ten sent
//     every Config.DeleteInterval. Failed entries, and only they, are retried; a "receipt handle
//     invalid" or 404 answer counts as gone.
//   - [Discard]: deleted without effect, logged and counted.
//   - [RetryAfter]: the visibility is set to the delay.
//   - any other error, a panic ([PanicError]) or a timeout: the visibility is set to the backoff
//     of the message's ApproximateReceiveCount (Config.Backoff), so the message comes back soon
//     but not at once, and reaches the dead-letter queue through the queue's redrive policy.
//   - [Unavailable]: as an error, and the pollers also pause, with growing backoff, and then
//     probe one message at a time until a handler succeeds.
//
// # Long handlers
//
// While a handler runs, a heartbeat extends its message's visibility every third of the
// visibility timeout, never past SQS's 12-hour cap counted from the receive that delivered it. When it
// cannot, the handler's context is cancelled with the cause [ErrLeaseLost], so that its work
// rolls back instead of committing for a message someone else may hold. A failed extension is
// retried with exponential backoff and jitter, from one second up to the heartbeat interval,
// with a last try before the lease's final two seconds; the first failure in a row is logged as
// a warning and the others at debug level.
//
// # FIFO queues
//
// On a FIFO queue, the messages of one MessageGroupId from a receive run in order, one at a
// time; groups run in parallel. When one fails, the later ones of its group are released
// (visibility 0) rather than run.
//
// # Start and stop
//
// [Worker.Start] reads the queue's attributes ([Queue]), refuses a queue whose visibility timeout
// is 0, warns when there is no redrive policy, and runs the handler's [QueueChecker] (the inbox
// adapter refuses an inbox retention shorter than the queue's). [Worker.Stop] stops receiving,
// releases what has not started, lets handlers finish for up to Config.ShutdownTimeout, flushes
// the deletes, and returns when no goroutine of the worker is left. [Worker.StopAndCancel]
// cancels the handlers at once. The worker installs no signal handlers: the program does.
//
// # The client
//
// The worker takes any [SQSClient]: an *sqs.Client built with the standard AWS configuration
// (which honours AWS_ENDPOINT_URL_SQS, so one binary talks to AWS, LocalStack or GoAws), or a
// fake. Every call passes [PlainRequestBodies], which avoids an SDK fault that loses received
// messages to the visibility timeout.
//
// # Observability
//
// Logs go to Config.Logger (log/slog); message bodies are never logged. Counters and histograms
// go to Config.Metrics ([Metrics]); the workerprom package implements it for Prometheus.
package worker
