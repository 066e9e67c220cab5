package worker

import "context"

// Handler processes one message. Its return value steers SQS:
//
//   - nil: the work is done; the message is deleted.
//   - [ErrDuplicate]: the work was done before; the message is deleted and counted as a duplicate.
//   - [Discard]: the message cannot be processed; it is deleted without effect, logged, counted.
//   - [RetryAfter]: the message is delivered again after the given delay.
//   - [RetryBlocked]: likewise, for work another consumer holds; counted as [Blocked], not failed.
//   - [Unavailable]: the pollers pause, with growing backoff, then probe one message at a time
//     until a handler succeeds (a dependency every message needs is down). The message stays in
//     hand, leased, and runs again when the pause ends (on a FIFO queue, with the rest of its
//     group waiting behind it; with MaxPerGroup: as any error, after a delay past the pause).
//   - [BrokenDeployment]: as [Unavailable], but not counted as a failure, logged once at Error
//     level, and failing readiness at once (a missing table, column or grant).
//   - any other error, a panic ([PanicError]) or a timeout: the message is delivered again after
//     the backoff of its ApproximateReceiveCount (Config.Backoff) and reaches the dead-letter
//     queue through the queue's redrive policy.
//
// ctx is cancelled, with a cause from [ErrLeaseLost], [ErrStopping] and [ErrHandlerTimeout],
// when the handler must give up; its work must then not commit.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// QueueChecker is implemented by a handler that must check the queue before the worker receives
// anything (the inbox adapter checks its retention against the queue's). [Worker.Start] calls it
// after it has read the queue's attributes, and fails if it fails.
type QueueChecker interface {
	CheckQueue(ctx context.Context, q *Queue) error
}

// CapacityChecker is implemented by a handler whose calls each hold a resource of a bounded pool
// while they run (the inbox handler: one database connection per call, a batch's included).
// [Worker.Start] calls it, after the [QueueChecker], with Config.Concurrency, the most handler
// calls the worker runs at once. A non-nil error is a warning: Start logs it and goes on, since
// the worker still works, only slower (calls wait for the resource, and the wait counts against
// the handler timeout).
type CapacityChecker interface {
	CheckCapacity(concurrency int) error
}
