package inboxhandler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Func is the work done for one message, inside the transaction that claims its event. All of its
// database writes must go through tx. It may return the worker's typed results
// ([worker.RetryAfter], [worker.Discard]); any error rolls everything back, the claim included.
type Func func(ctx context.Context, tx pgx.Tx, m *worker.Message) error

// Handler is a [worker.Handler] that runs a [Func] at most once per event key, with an
// [inbox.Inbox]. It also implements [worker.QueueChecker] and [worker.CapacityChecker].
type Handler struct {
	ib   *inbox.Inbox
	name string
	key  KeyFunc
	fn   Func
}

// New returns a handler named name (the inbox's handler scope: the same event is processed once
// per name) that takes each message's event key with key, or with [DefaultKey] when key is nil,
// and runs fn in the inbox's transaction.
func New(ib *inbox.Inbox, name string, key KeyFunc, fn Func) (*Handler, error) {
	if ib == nil {
		return nil, errors.New("inboxhandler: inbox is nil")
	}
	if fn == nil {
		return nil, errors.New("inboxhandler: fn is nil")
	}
	if err := inbox.ValidateHandler(name); err != nil {
		return nil, fmt.Errorf("inboxhandler: name: %w", err)
	}
	if key == nil {
		key = DefaultKey
	}
	return &Handler{ib: ib, name: name, key: key, fn: fn}, nil
}

// Handle takes m's key and runs fn once per key. It returns nil when fn's work committed,
// [worker.ErrDuplicate] when the event was processed before, the key's error (which sends the
// message the retry-then-DLQ way) when it has no valid key, [worker.RetryBlocked] when another
// transaction holds the event's uncommitted claim (retried after the inbox's
// IdleInTransactionTimeout, by when a frozen holder has been ended), and [worker.Unavailable]
// wrapping the error when the inbox's own connection failed or a commit's outcome is unknown:
// the worker then does not delete the message, and pauses its pollers. Any other error of fn is
// returned as it is: a failure of this message, not of the database. fn can return
// [worker.Unavailable] itself for a dependency that every message needs.
func (h *Handler) Handle(ctx context.Context, m *worker.Message) error {
	key, err := h.key(m)
	if err != nil {
		err = fmt.Errorf("inboxhandler %s: message %s: %w", h.name, m.ID, err)
		recordFailures(ctx, h.ib, []inbox.Failure{failure(h.name, "", m, err)})
		return err
	}
	out, err := h.ib.Run(inbox.WithDelivery(ctx, delivery(m)), h.name, key, func(ctx context.Context, tx pgx.Tx) error {
		return h.fn(ctx, tx, m)
	})
	res := h.result(ctx, out, err)
	if failed(ctx, res) {
		recordFailures(ctx, h.ib, []inbox.Failure{failure(h.name, key, m, res)})
	}
	return res
}

// recordTimeout bounds the statement that records a message's failures: the message's
// settlement waits for it.
const recordTimeout = 5 * time.Second

// recordFailures records fs after their transaction rolled back, bounded by recordTimeout even
// when ctx has ended (a timeout is a failure too). It is best effort: the inbox counts and logs
// a failure it could not record, and the message's result stays what it was.
func recordFailures(ctx context.Context, ib *inbox.Inbox, fs []inbox.Failure) {
	if len(fs) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	_ = ib.RecordFailures(rctx, fs)
}

// failure is the record of m's failed attempt by handler, with the event key (empty when m has
// none).
func failure(handler, key string, m *worker.Message, err error) inbox.Failure {
	return inbox.Failure{Handler: handler, EventID: key, MessageID: m.ID, Queue: m.Queue, ReceiveCount: m.ReceiveCount, Error: err.Error()}
}

// failed reports whether res, a message's result, is a failure of the message's own, which the
// inbox records: an error of the handler (a typed retry or discard included), a panic, a
// timeout, or no valid key. A duplicate, a message not run (FIFO order), a blocked claim, an
// outage, a broken deployment and a stop (ctx ended for another reason than the handler
// timeout) are not the message's fault and are not recorded.
func failed(ctx context.Context, res error) bool {
	var (
		blocked     *worker.BlockedError
		unavailable *worker.UnavailableError
		deployment  *worker.DeploymentError
	)
	switch {
	case res == nil, errors.Is(res, worker.ErrDuplicate), errors.Is(res, worker.ErrNotRun),
		errors.As(res, &blocked), errors.As(res, &unavailable), errors.As(res, &deployment):
		return false
	case ctx.Err() != nil:
		return errors.Is(res, worker.ErrHandlerTimeout) || errors.Is(context.Cause(ctx), worker.ErrHandlerTimeout)
	}
	return true
}

// delivery is what the inbox records of m with its claim, for an operator's lookup.
func delivery(m *worker.Message) inbox.Delivery {
	return inbox.Delivery{MessageID: m.ID, Queue: m.Queue, ReceiveCount: m.ReceiveCount, TraceID: m.TraceID()}
}

// result turns the inbox's outcome of one event into the worker's result.
func (h *Handler) result(ctx context.Context, out inbox.Outcome, err error) error {
	switch {
	case err == nil && out == inbox.Duplicate:
		return worker.ErrDuplicate
	case err == nil:
		return nil
	case errors.Is(err, worker.ErrNotRun):
		return err // refused by the batch's order (FIFO)
	case errors.Is(err, inbox.ErrBrokenDeployment):
		return worker.BrokenDeployment(err)
	case errors.Is(err, inbox.ErrTimeout):
		return fmt.Errorf("%w: %w", worker.ErrHandlerTimeout, err)
	case ctx.Err() != nil:
		return err
	case errors.Is(err, inbox.ErrClaimBlocked):
		return worker.RetryBlocked(h.ib.BlockedRetryDelay(), err)
	case errors.Is(err, inbox.ErrConnectionLost):
		return worker.Unavailable(err)
	case errors.Is(err, inbox.ErrTwinNotProcessed), errors.Is(err, inbox.ErrBatchStopped):
		return fmt.Errorf("%w: %w", worker.ErrNotRun, err)
	}
	return err
}

// HandleBatch implements [worker.BatchHandler]: the messages of b run in one transaction of the
// inbox ([inbox.Inbox.RunBatch]), each in a savepoint of its own, with one COMMIT. Each message's
// result is what [Handler.Handle] would return for it (the inbox's outcome table): a message whose
// work failed is rolled back alone and takes the failure path, and the others commit. Each
// message's work is bounded by the worker's handler timeout from its own turn. On a FIFO queue,
// b orders the batch (it is the inbox's Order): a message without a key, or whose work fails,
// halts the rest of its group ([worker.ErrNotRun]).
func (h *Handler) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	return handleBatch(ctx, h.ib, b, func(*worker.Message) (*Handler, error) { return h, nil })
}

// handleBatch runs b in one transaction of ib, each message with the Handler pick chooses for it
// (an error is the message's result): so one batch may serve several handlers, each with its own
// name (its inbox scope), key and function, and a FIFO group keeps its order across them. The
// handlers must share ib.
func handleBatch(ctx context.Context, ib *inbox.Inbox, b *worker.Batch, pick func(*worker.Message) (*Handler, error)) []error {
	res := make([]error, b.Len())
	var fails []inbox.Failure
	defer func() { recordFailures(ctx, ib, fails) }()
	items := make([]inbox.Item, 0, b.Len())
	idx := make([]int, 0, b.Len())
	hs := make([]*Handler, b.Len())
	for i := range b.Len() {
		m := b.Message(i)
		h, err := pick(m)
		key := ""
		if err == nil {
			if key, err = h.key(m); err != nil {
				err = fmt.Errorf("inboxhandler %s: message %s: %w", h.name, m.ID, err)
			}
		}
		if err != nil {
			if res[i] = b.Runnable(i); res[i] == nil {
				res[i] = err
				if h != nil {
					fails = append(fails, failure(h.name, "", m, err))
				}
				var discard *worker.DiscardError
				if !errors.As(err, &discard) { // a discarded message is done: its group goes on
					b.Halt(i)
				}
			}
			continue
		}
		hs[i] = h
		items = append(items, inbox.Item{Handler: h.name, Key: key, Ctx: b.Context(i), Timeout: b.Timeout(), Delivery: delivery(m),
			Fn: func(ctx context.Context, tx pgx.Tx) error {
				return b.Run(ctx, i, func(ctx context.Context) error { return h.fn(ctx, tx, m) })
			}})
		idx = append(idx, i)
	}
	if len(items) == 0 {
		return res
	}
	results, st := ib.RunBatch(ctx, items, itemOrder{b, idx})
	for j, r := range results {
		i := idx[j]
		res[i] = hs[i].result(b.Context(i), r.Outcome, r.Err)
		if failed(b.Context(i), res[i]) {
			fails = append(fails, failure(hs[i].name, items[j].Key, b.Message(i), res[i]))
		}
	}
	b.Count(worker.RolledBack, st.RolledBack)
	b.Count(worker.BatchRetries, st.Retries)
	return res
}

// itemOrder is b as the order of the inbox's items: item j is message idx[j] of b.
type itemOrder struct {
	b   *worker.Batch
	idx []int
}

func (o itemOrder) Runnable(j int) error { return o.b.Runnable(o.idx[j]) }
func (o itemOrder) Halt(j int)           { o.b.Halt(o.idx[j]) }

// minMaxReceiveCount is the smallest maxReceiveCount with which an event survives a consumer
// frozen while it holds the event's claim: the delivery to the frozen consumer, one redelivery
// that finds the claim blocked and waits IdleInTransactionTimeout (by then the server has ended
// the frozen session), and one that runs.
const minMaxReceiveCount = 3

// CheckQueue runs the inbox's start-up checks (migrated schema, durable commits), refuses a
// retention shorter than the queue's redelivery horizon (see [worker.Queue.RedeliveryHorizon]),
// and refuses a redrive policy whose maxReceiveCount is under 3: with fewer receives, an event
// whose claim is held by a frozen consumer reaches the dead-letter queue before the server has
// ended that consumer's session (inbox Config.IdleInTransactionTimeout), and nobody applies it.
// Errors name the database server. Then it publishes the handler's name as the queue's routes
// ([inbox.Routes].Handler: every message of the queue goes to it), so that `sqsinbox redrive` and
// the console classify the queue's dead-lettered messages against it without --handler; a
// failure to publish fails the start, as it does a [Router]'s.
func (h *Handler) CheckQueue(ctx context.Context, q *worker.Queue) error {
	if err := h.checkInbox(ctx, q); err != nil {
		return err
	}
	if _, err := h.ib.PublishRoutes(ctx, inbox.Routes{Queue: q.Name, Handler: h.name}); err != nil {
		return fmt.Errorf("inboxhandler: handler %s for queue %s: %w", h.name, q.Name, err)
	}
	return nil
}

// checkInbox is CheckQueue's checks, which a Router runs for its routes too.
func (h *Handler) checkInbox(ctx context.Context, q *worker.Queue) error {
	if err := h.ib.Check(ctx); err != nil {
		cc := h.ib.Pool().Config().ConnConfig
		return fmt.Errorf("inboxhandler: database %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	if q.MaxReceiveCount > 0 && q.MaxReceiveCount < minMaxReceiveCount {
		return fmt.Errorf("inboxhandler: queue %s has maxReceiveCount %d; the inbox needs at least %d: "+
			"a consumer frozen while it holds an event's claim keeps it until the database ends its session "+
			"(inbox Config.IdleInTransactionTimeout, %v), and the event needs one delivery to that consumer, "+
			"one blocked retry and one that runs, or it is dead-lettered unapplied; raise maxReceiveCount",
			q.Name, q.MaxReceiveCount, minMaxReceiveCount, h.ib.IdleInTransactionTimeout())
	}
	return h.ib.CheckRetention(q.RedeliveryHorizon())
}

// MaxConcurrency implements [worker.ConcurrencyLimiter]: each handler call holds one of the
// pool's connections for its transaction, and the purge loop takes one, so a worker that sizes
// its concurrency (Config.Concurrency 0) runs at most the pool's MaxConns less one calls.
func (h *Handler) MaxConcurrency() int { return int(h.ib.Pool().Config().MaxConns) - 1 }

// CheckCapacity implements [worker.CapacityChecker]: it warns when the inbox's pool holds fewer
// connections than the worker's concurrency. Each handler call (a batch included) holds a
// connection for its transaction; short of that, calls wait for a connection, and the wait counts
// against the handler timeout. The inbox's purge loop ([inbox.Inbox.PurgeLoop]), when the program
// runs one on the same pool, wants one more, which the warning's fix counts in; a program that
// runs none is not warned for it. The pool's size is pgxpool's MaxConns: pool_max_conns in the
// connection string, else pgxpool's default of max(4, the number of CPUs).
func (h *Handler) CheckCapacity(concurrency int) error {
	have := h.ib.Pool().Config().MaxConns
	if need := int32(concurrency); have < need {
		return fmt.Errorf("inboxhandler: the database pool holds at most %d connections (pgxpool MaxConns: pool_max_conns "+
			"in the connection string, else max(4, CPUs)), but the worker runs up to %d handler calls at once (worker "+
			"Config.Concurrency), each holding a connection for its transaction: set pool_max_conns=%d or more (%d if "+
			"inbox.PurgeLoop shares the pool), or lower Concurrency to %d", have, concurrency, need, need+1, have)
	}
	return nil
}

// LogValue describes the handler for the worker's start-up log line: its name, the version of
// the routes it publishes (its name), and the inbox's retention and timeouts.
func (h *Handler) LogValue() slog.Value {
	published := inbox.Routes{Handler: h.name}
	return slog.GroupValue(slog.String("name", h.name), slog.String("routes_version", published.Version()), slog.String("inbox_schema", h.ib.Schema()),
		slog.Duration("inbox_retention", h.ib.Retention()),
		slog.Duration("idle_in_transaction_timeout", h.ib.IdleInTransactionTimeout()))
}
