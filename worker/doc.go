// Package worker receives messages from an SQS queue and runs a [Handler] on each, deleting a
// message only after its handler succeeded. It knows nothing of SQL: the inboxhandler package
// joins it to the PostgreSQL inbox, which makes the processing exactly once in effect.
//
// # Data path
//
// Pollers call ReceiveMessage (long polling, asking only for as many messages as there are free
// slots: room for Config.Concurrency handler calls of up to Config.HandlerBatch messages each, plus
// Config.Prefetch held ones); each message is leased from its receive (its visibility is kept up
// by a heartbeat until it is settled or released) and queued. Config.Concurrency runners take
// them: one message at a time for a plain [Handler], up to Config.HandlerBatch at a time for a
// [BatchHandler] (waiting up to Config.Linger for a batch to fill). A handler runs with a context
// that is cancelled on timeout, lost lease or stop. What the handler returns steers SQS: see
// [Handler]. Deletes go out in DeleteMessageBatch calls of up to ten, every
// Config.DeleteInterval; failed entries, and only they, are retried, and "receipt handle invalid"
// or 404 (on FIFO also "receipt handle has expired") counts as gone.
//
// # Batches
//
// The inbox handler is a [BatchHandler]: the messages of a batch share one PostgreSQL transaction,
// a savepoint each, and one COMMIT (see inbox.Inbox.RunBatch); each message still gets its own
// result, so a failed one retries alone. [Batch.Run] gives each message's work its own context,
// handler timeout and panic recovery.
//
// # Prefetch
//
// Held messages (received, not yet started) are covered as running ones are: leased, released at
// stop, kept leased through a pause (a dependency every message needs is down; on a FIFO queue
// each group waits, in order, in its runner; with MaxPerGroup, released), and released once they
// have waited Config.MaxHold (not in a pause). During a pause one message in hand at a time runs as the probe; with none in hand the
// pollers receive one message at a time, once nothing else is outstanding.
//
// # Long handlers and held messages
//
// The lease's heartbeat extends the visibility every third of the visibility timeout, never past
// SQS's 12-hour cap ([MaxVisibility]); when it cannot, the handler is cancelled with
// [ErrLeaseLost] (Config.VisibilityTimeout says more).
//
// # FIFO queues
//
// On a FIFO queue, the messages of one MessageGroupId from a receive stay with one runner and run
// in order, inside a batch and across batches; groups run in parallel. The ones waiting behind a
// running head keep their lease. When one is not done (it failed, or it did not start: a refused
// SNS envelope, a lease lost while it waited, a message held past Config.MaxHold), the later ones
// of its group are released (visibility 0) rather than run, in its batch too: the rule lives in
// the worker's group, and [Batch.Runnable] and [Batch.Halt] give it to batch handlers (the
// inbox's batch follows it as its order). One that fails because a dependency is down is not
// given up: it is parked in its group, the later ones wait behind it, leased, and the group runs
// on, in order, when the pause ends.
//
// # Start and stop
//
// [Worker.Start] reads the queue's attributes ([Queue]) and its dead-letter queue's retention,
// refuses a queue whose visibility timeout is 0, warns when there is no redrive policy, and runs
// the handler's [QueueChecker], all within Config.StartTimeout, and logs a warning when the
// handler's [CapacityChecker] finds its resources short of Config.Concurrency (for the inbox: a
// database pool smaller than Concurrency). [Worker.Stop] stops receiving,
// releases what has not started, lets handlers finish for up to Config.ShutdownTimeout, flushes
// the deletes, and returns when no goroutine of the worker is left. [Worker.StopAndCancel]
// cancels the handlers at once. Each logs one line at Info level. The worker installs no signal
// handlers: the program does.
//
// # The client
//
// The worker takes any [SQSClient]: an *sqs.Client built with the standard AWS configuration
// (which honours AWS_ENDPOINT_URL_SQS, so one binary talks to AWS, LocalStack, GoAws or fauxqs),
// or a fake. Every call passes [PlainRequestBodies].
//
// # Observability
//
// Logs go to Config.Logger (log/slog); message bodies are never logged. Counters and histograms
// go to Config.Metrics ([Metrics]); the workerprom package implements it for Prometheus.
package worker
