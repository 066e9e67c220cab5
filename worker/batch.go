package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
)

// BatchHandler is a [Handler] that can also process several messages in one call: the inbox
// handler runs them in one PostgreSQL transaction, a savepoint each, and commits once. The worker
// groups the messages it holds into batches of up to Config.HandlerBatch (waiting up to
// Config.Linger for a batch to fill) and calls HandleBatch; Handle is still called where a batch
// would hold one message only if Config.HandlerBatch is 1.
//
// HandleBatch returns one result per message of b, in b's order, with the meaning of
// [Handler.Handle]'s results; a message whose result is nil or [ErrDuplicate] is deleted. It runs
// each message's own work through [Batch.Run], which gives that work its message's context,
// handler timeout and panic recovery.
//
// On a FIFO queue, the messages of one group come in their order, and the batch keeps the FIFO
// rule for the handler: once a message is not done, the later ones of its group must not run.
// [Batch.Run] refuses them (an error wrapping [ErrNotRun]: the worker releases them) and halts the
// group when the work it runs fails; a handler that fails a message outside Batch.Run (a message
// without a key, a failure it decides after the work returned) calls [Batch.Halt] at once, and
// asks [Batch.Runnable] before any work of its own. [Batch] implements inbox.Order, so the
// inbox's batch follows the same rule.
type BatchHandler interface {
	Handler
	HandleBatch(ctx context.Context, b *Batch) []error
}

func isBatchHandler(h Handler) bool {
	_, ok := h.(BatchHandler)
	return ok
}

// ErrNotRun is a result (for [BatchHandler.HandleBatch]) of a message that was not run for a
// reason outside it: an earlier message of its FIFO group failed, or an earlier message of the
// batch carried the same event and did not commit. The message is made visible again at once
// and counted as Released, not as failed.
var ErrNotRun = errors.New("worker: message not run")

// Batch is the messages of one [BatchHandler.HandleBatch] call.
type Batch struct {
	ds      []*delivery
	ctxs    []context.Context
	cancels []context.CancelCauseFunc
	causes  []error // why Run's context of each message ended (its handler timeout), if it did
	timeout time.Duration
	metrics Metrics
}

// Runnable returns nil when the i-th message may run now, or an error wrapping [ErrNotRun] when
// an earlier message of its FIFO group was not done (the worker then releases it). It implements
// inbox.Order.
func (b *Batch) Runnable(i int) error {
	if b.ds[i].behind() {
		return errGroupHalted
	}
	return nil
}

// errGroupHalted is the result of a message not run behind one of its FIFO group not done.
var errGroupHalted = fmt.Errorf("%w: an earlier message of its FIFO group was not done", ErrNotRun)

// Halt says that the i-th message is not done: the later messages of its FIFO group will not run
// (in this batch, [Batch.Runnable] refuses them; those the worker still holds are released). It
// does nothing on a standard queue. It implements inbox.Order.
func (b *Batch) Halt(i int) {
	if g := b.ds[i].group; g != nil {
		// Marked now; the rest of the group is released when the message ends, unless it is
		// parked in a pause (group.park), when the rest waits behind it.
		g.mark(b.ds[i])
	}
}

// Timeout returns Config.HandlerTimeout: how long the work of one message may run (0: no bound).
// [Batch.Run] applies it; a handler that runs the work some other way (the inbox, which starts
// each message's timeout at its turn) applies it itself.
func (b *Batch) Timeout() time.Duration { return b.timeout }

// Len returns the number of messages in the batch.
func (b *Batch) Len() int { return len(b.ds) }

// Message returns the i-th message.
func (b *Batch) Message(i int) *Message { return b.ds[i].m }

// Context returns the i-th message's context: it descends from HandleBatch's, and is cancelled
// when the message's lease is lost (cause [ErrLeaseLost]). Work for the message should run with
// a context descending from it, through [Batch.Run].
func (b *Batch) Context(i int) context.Context { return b.ctxs[i] }

// SetContext replaces the i-th message's context with ctx, which must descend from
// [Batch.Context](i): middleware uses it to put the message's span (or values) into the context
// its work runs with.
func (b *Batch) SetContext(i int, ctx context.Context) { b.ctxs[i] = ctx }

// Run runs fn, the work of the i-th message, with ctx (which should descend from
// [Batch.Context](i)) bounded by Config.HandlerTimeout from now. A panic in fn is recovered and
// returned as a *[PanicError]. The time it takes is the message's handler duration. It does not
// run fn when [Batch.Runnable] refuses the message, and returns that error; when fn fails, it
// halts the message's FIFO group ([Batch.Halt]).
func (b *Batch) Run(ctx context.Context, i int, fn func(ctx context.Context) error) (err error) {
	if err := b.Runnable(i); err != nil {
		return err
	}
	start := time.Now()
	hctx, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); b.timeout > 0 && (!ok || dl.After(start.Add(b.timeout))) {
		// Unless the caller has bounded the work already (the inbox starts each message's
		// timeout at its turn).
		hctx, cancel = context.WithTimeoutCause(ctx, b.timeout, ErrHandlerTimeout)
	}
	defer func() {
		if v := recover(); v != nil {
			err = panics.Recovered(v)
		}
		if hctx.Err() != nil {
			b.causes[i] = context.Cause(hctx)
		}
		if err != nil {
			b.Halt(i)
		}
		cancel()
		b.metrics.Observe(HandlerDuration, time.Since(start))
	}()
	return fn(hctx)
}

// Count adds n to the worker's counter c: a batch handler reports what happened inside the batch
// ([RolledBack], [BatchRetries]).
func (b *Batch) Count(c Counter, n int) {
	if n != 0 {
		b.metrics.Add(c, n)
	}
}

// processBatch runs a batch of deliveries through the batch handler; each delivery settles itself.
func (w *Worker) processBatch(bh BatchHandler, ds []*delivery) {
	b := &Batch{timeout: max(w.cfg.HandlerTimeout, 0), metrics: w.e.metrics}
	for _, d := range ds {
		if d.refused != nil || d.behind() {
			d.notStarted()
			continue
		}
		ctx, cancel, ok := d.start(w.e.work) // Run adds the handler timeout
		if !ok {
			d.notStarted()
			continue
		}
		b.add(d, ctx, cancel)
	}
	if b.Len() == 0 {
		return
	}
	e := w.e
	e.metrics.Add(Batches, 1)
	e.metrics.Add(BatchedMessages, b.Len())
	e.metrics.SetInFlight(int(e.inFlight.Add(int64(b.Len()))))
	results := callBatch(e.work, bh, b)
	e.metrics.SetInFlight(int(e.inFlight.Add(-int64(b.Len()))))
	for j, d := range b.ds {
		d.lease.stop()
		cause := b.causes[j]
		if cause == nil {
			cause = context.Cause(b.ctxs[j])
		}
		b.cancels[j](nil)
		d.settle(results[j], cause)
	}
}

// add puts d in the batch with the context its work runs with.
func (b *Batch) add(d *delivery, ctx context.Context, cancel context.CancelCauseFunc) {
	b.ds = append(b.ds, d)
	b.ctxs = append(b.ctxs, ctx)
	b.cancels = append(b.cancels, cancel)
	b.causes = append(b.causes, nil)
}

// callBatch calls HandleBatch, turning a panic or a wrong number of results into an error for
// every message.
func callBatch(parent context.Context, bh BatchHandler, b *Batch) (results []error) {
	defer func() {
		if v := recover(); v != nil {
			err := panics.Recovered(v)
			results = make([]error, b.Len())
			for i := range results {
				results[i] = err
			}
		}
	}()
	// The batch's own work (for the inbox: its claim, savepoints and COMMIT) is bounded as its
	// messages' handlers are: each has the handler timeout, and they run one after another.
	ctx, cancel := parent, context.CancelFunc(func() {})
	if b.timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(parent, time.Duration(b.Len())*b.timeout, ErrHandlerTimeout)
	}
	defer cancel()
	results = bh.HandleBatch(ctx, b)
	if len(results) != b.Len() {
		err := fmt.Errorf("worker: HandleBatch returned %d results for %d messages", len(results), b.Len())
		results = make([]error, b.Len())
		for i := range results {
			results[i] = err
		}
	}
	return results
}

// RunBatch hands msgs to h in one HandleBatch call, as the worker does with a batch it has
// received, and returns each message's result (see [Handler] for what each means to the worker).
// Each message's work gets a context of its own, descending from ctx, and timeout as its handler
// timeout (0: none); a panic becomes a *[PanicError]; messages with a GroupID keep the FIFO rule
// (a message not done halts the later ones of its group, whose result then wraps [ErrNotRun])
// unless their Queue names a standard queue (set, without the ".fifo" suffix): a fair queue's
// groups have no order. It
// is the worker's batch less the SQS side (leases, deletes, retries): the test kit
// (inboxhandler/handlertest) delivers through it. msgs are copied; at most [MaxHandlerBatch].
func RunBatch(ctx context.Context, h BatchHandler, msgs []*Message, timeout time.Duration) []error {
	if len(msgs) > MaxHandlerBatch {
		err := fmt.Errorf("worker: RunBatch got %d messages; at most %d (MaxHandlerBatch)", len(msgs), MaxHandlerBatch)
		results := make([]error, len(msgs))
		for i := range results {
			results[i] = err
		}
		return results
	}
	b := &Batch{timeout: max(timeout, 0), metrics: nopMetrics{}}
	ds := make([]*delivery, len(msgs))
	for i, m := range msgs {
		c := *m
		ds[i] = &delivery{m: &c}
	}
	for _, g := range groups(ds) {
		if g[0].m.GroupID == "" || (g[0].m.Queue != "" && !strings.HasSuffix(g[0].m.Queue, ".fifo")) {
			continue
		}
		grp := &group{}
		for i, d := range g {
			d.group, d.pos = grp, i
		}
	}
	for _, d := range ds {
		mctx, cancel := context.WithCancelCause(ctx)
		b.add(d, mctx, cancel)
	}
	defer func() {
		for _, cancel := range b.cancels {
			cancel(nil)
		}
	}()
	return callBatch(ctx, h, b)
}
