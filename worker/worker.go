package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/semaphore"
)

// Backoff of a poller after failed receives, and of the pause after [Unavailable] results.
const (
	pollBackoffMin  = 100 * time.Millisecond
	pollBackoffMax  = 30 * time.Second
	pauseBackoffMin = 500 * time.Millisecond
	pauseBackoffMax = 30 * time.Second
	// shortPollIdle is the pause after an empty receive when long polling is off.
	shortPollIdle = 200 * time.Millisecond
	// callTimeout bounds each visibility and delete call.
	callTimeout = 15 * time.Second
	// capMargin keeps every visibility request clear of the 12-hour cap.
	capMargin = 5 * time.Second
	// gatherWait is how long a poller holding some free slots waits for more before it receives.
	gatherWait = 5 * time.Millisecond
	// receiveGrace is how long a stop lets a receive in flight finish before abandoning it.
	receiveGrace = 2 * time.Second
)

var receiveAttributes = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
var allMessageAttributes = []string{"All"}

// Worker receives messages from one SQS queue and runs a handler on each, at most
// Config.Concurrency at once. It deletes a message only after its handler succeeded.
type Worker struct {
	client  SQSClient
	cfg     Config
	log     *slog.Logger
	metrics Metrics

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed when everything has stopped

	queue *Queue
	vis   time.Duration // the visibility timeout in force

	slots    *semaphore.Weighted
	inFlight atomic.Int64
	stopping atomic.Bool
	released atomic.Int64 // messages released, for the stop's log line
	deleted  atomic.Int64 // messages deleted, likewise
	noCMVB   atomic.Bool  // ChangeMessageVisibilityBatch is not supported (GoAws)

	now func() time.Time // the clock of the 12-hour cap; tests move it

	stopCtx    context.Context // ends at the start of a stop: no new receives
	stopCancel context.CancelCauseFunc
	recvCtx    context.Context // ends at a hard stop: receives in flight are abandoned
	recvCancel context.CancelCauseFunc
	workCtx    context.Context
	workCancel context.CancelCauseFunc

	pendingMu sync.Mutex
	pending   map[*group]struct{} // FIFO groups with messages not yet started

	pollers  sync.WaitGroup
	handlers sync.WaitGroup
	del      *deleter
	pause    pauser
}

// New returns a worker that reads with client, as cfg says. It does no I/O; [Worker.Start] does.
// Pass an *sqs.Client built from the standard AWS configuration (which honours
// AWS_ENDPOINT_URL_SQS), so one binary talks to AWS, LocalStack or GoAws.
func New(client SQSClient, cfg *Config) (*Worker, error) {
	if client == nil {
		return nil, errors.New("worker: client is nil")
	}
	if cfg == nil {
		return nil, errors.New("worker: Config is nil (Config.Handler and the queue are required)")
	}
	c := *cfg
	c.setDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if t := clientHTTPTimeout(client); t > 0 && c.WaitTime > 0 && t <= c.WaitTime {
		return nil, fmt.Errorf("worker: Config.WaitTime is %v but the SQS client's HTTP timeout is %v: "+
			"a long poll would time out; raise the HTTP timeout or lower Config.WaitTime", c.WaitTime, t)
	}
	return &Worker{
		client:  client,
		cfg:     c,
		log:     c.Logger,
		metrics: c.Metrics,
		now:     time.Now,
		done:    make(chan struct{}),
		slots:   semaphore.NewWeighted(int64(c.Concurrency)),
	}, nil
}

// Queue returns what the worker learned about its queue at start, or nil before
// [Worker.Start] has succeeded.
func (w *Worker) Queue() *Queue {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queue
}

// InFlight returns the number of handlers running now.
func (w *Worker) InFlight() int { return int(w.inFlight.Load()) }

// Start reads the queue's attributes, runs the start-up checks and starts the pollers. It
// returns once the worker is running, or with the reason it refused to start:
//   - the queue's visibility timeout (or Config.VisibilityTimeout) is 0;
//   - the handler's [QueueChecker] failed (for the inbox: its retention is shorter than the
//     queue's MessageRetentionPeriod, or its database is not ready).
//
// A queue without a redrive policy only logs a warning: failing messages then retry until the
// retention period ends. ctx bounds the start-up calls and carries values to the handlers; it does
// not stop the worker when it ends after Start returned ([Worker.Stop] does).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Start called twice")
	}
	w.started = true
	w.mu.Unlock()
	if err := w.start(ctx); err != nil {
		w.mu.Lock()
		w.started = false // a failed Start may be tried again
		w.mu.Unlock()
		return err
	}
	return nil
}

func (w *Worker) start(ctx context.Context) error {
	base := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeoutCause(ctx, w.cfg.StartTimeout, errStartTimeout)
	defer cancel()
	q, vis, log, err := w.prepare(sctx)
	if err != nil {
		if errors.Is(context.Cause(sctx), errStartTimeout) {
			return fmt.Errorf("worker: start-up did not finish within %v (Config.StartTimeout; SQS endpoint %s): %w",
				w.cfg.StartTimeout, w.endpoint(), err)
		}
		return err
	}
	w.mu.Lock()
	w.queue, w.vis, w.log = q, vis, log
	w.mu.Unlock()
	w.stopCtx, w.stopCancel = context.WithCancelCause(base)
	w.recvCtx, w.recvCancel = context.WithCancelCause(base)
	w.workCtx, w.workCancel = context.WithCancelCause(base)
	w.del = newDeleter(w)
	for range w.cfg.Pollers {
		w.pollers.Add(1)
		go w.poll()
	}
	attrs := []any{"concurrency", w.cfg.Concurrency, "pollers", w.cfg.Pollers, "fifo", q.FIFO,
		"visibility_timeout", vis, "redelivery_horizon", q.RedeliveryHorizon(), "max_receive_count", q.MaxReceiveCount}
	if lv, ok := w.cfg.Handler.(slog.LogValuer); ok {
		attrs = append(attrs, "handler", lv)
	}
	w.log.Info("worker: started", attrs...)
	return nil
}

// errStartTimeout is the cause of Start's context when Config.StartTimeout ends it.
var errStartTimeout = errors.New("worker: start timeout")

// prepare reads the queue and runs the start-up checks.
func (w *Worker) prepare(ctx context.Context) (*Queue, time.Duration, *slog.Logger, error) {
	q, err := loadQueue(ctx, w.client, w.cfg.QueueURL, w.cfg.QueueName, PlainRequestBodies)
	if err != nil {
		return nil, 0, nil, err
	}
	log := w.cfg.Logger.With("queue", q.Name)
	if q.DeadLetterTargetARN == "" {
		log.Warn("worker: queue has no redrive policy: a message that keeps failing is retried until its retention period ends; add a dead-letter queue")
	} else if err := q.loadDeadLetter(ctx, w.client, PlainRequestBodies); err != nil {
		// Fail closed: without the DLQ's retention the inbox could be checked against too short
		// a horizon and forget events SQS can still redeliver.
		if !w.cfg.IgnoreDeadLetterRetention {
			return nil, 0, nil, err
		}
		log.Warn("worker: could not read the dead-letter queue's retention; checking against the queue's own (Config.IgnoreDeadLetterRetention)", "error", err)
	}
	vis := w.cfg.VisibilityTimeout
	if vis == 0 {
		vis = q.VisibilityTimeout
	}
	if vis < time.Second {
		return nil, 0, nil, fmt.Errorf("worker: queue %s has a visibility timeout of %v, so every message would be delivered again at once; "+
			"set Config.VisibilityTimeout or the queue's VisibilityTimeout", q.Name, vis)
	}
	if w.cfg.HandlerTimeout > vis {
		log.Debug("worker: the handler timeout is longer than the visibility timeout; heartbeats keep long handlers' messages invisible",
			"handler_timeout", w.cfg.HandlerTimeout, "visibility_timeout", vis)
	}
	if qc, ok := w.cfg.Handler.(QueueChecker); ok {
		if err := qc.CheckQueue(ctx, q); err != nil {
			return nil, 0, nil, fmt.Errorf("worker: start-up check of queue %s: %w", q.Name, err)
		}
	}
	return q, vis, log, nil
}

// endpoint names the SQS endpoint the client talks to, for errors: its configured base
// endpoint, else the queue URL's.
func (w *Worker) endpoint() string {
	if oc, ok := w.client.(interface{ Options() sqs.Options }); ok {
		if ep := aws.ToString(oc.Options().BaseEndpoint); ep != "" {
			return ep
		}
	}
	if w.cfg.QueueURL != "" {
		if u, err := url.Parse(w.cfg.QueueURL); err == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host
		}
	}
	return "(the SDK's default for the region)"
}

// Stop stops receiving, releases received messages that have not started (visibility 0), lets
// in-flight handlers finish, flushes the pending deletes, and returns when nothing of the worker
// runs any more. Handlers still running after Config.ShutdownTimeout, or when ctx ends, are
// cancelled with [ErrStopping]. If ctx ends before they return, Stop returns ctx's error and the
// rest of the shutdown goes on in the background.
//
// A receive in progress is given two seconds to finish, and its messages are released:
// abandoning a receive that is returning messages would leave them invisible until their
// visibility timeout ends. A long poll still waiting after that has taken nothing and is
// abandoned.
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, false) }

// StopAndCancel is [Worker.Stop] that cancels the running handlers at once, with [ErrStopping].
// Their messages are made visible again.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, true) }

func (w *Worker) stop(ctx context.Context, cancelNow bool) error {
	w.mu.Lock()
	if w.queue == nil {
		w.mu.Unlock()
		return errors.New("worker: Stop called on a worker that is not running")
	}
	first := !w.stopped
	w.stopped = true
	w.mu.Unlock()
	if first {
		w.stopping.Store(true)
		w.stopCancel(ErrStopping)
		began, running := time.Now(), w.InFlight()
		released0, deleted0 := w.released.Load(), w.deleted.Load()
		go func() {
			grace := time.AfterFunc(receiveGrace, func() { w.recvCancel(ErrStopping) })
			w.pollers.Wait()
			grace.Stop()
			w.releasePending()
			w.handlers.Wait()
			w.del.close()
			cancelled := w.workCtx.Err() != nil
			w.recvCancel(ErrStopping)
			w.workCancel(ErrStopping)
			w.log.Info("worker: stopped", "handlers_running_at_stop", running, "handlers_cancelled", cancelled,
				"released", w.released.Load()-released0, "deleted_during_stop", w.deleted.Load()-deleted0,
				"took", time.Since(began).Round(time.Millisecond))
			close(w.done)
		}()
	}
	if cancelNow {
		w.workCancel(ErrStopping)
	}
	soft := time.NewTimer(w.cfg.ShutdownTimeout)
	defer soft.Stop()
	select {
	case <-w.done:
		return nil
	case <-soft.C:
		w.log.Warn("worker: shutdown timeout reached; cancelling running handlers", "in_flight", w.InFlight())
	case <-ctx.Done():
	}
	w.recvCancel(ErrStopping)
	w.workCancel(ErrStopping)
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: stop: %d handlers still running: %w", w.InFlight(), ctx.Err())
	}
}

func (w *Worker) poll() {
	defer w.pollers.Done()
	ctx := w.stopCtx
	fails := 0
	for {
		if err := w.pause.wait(ctx); err != nil {
			return
		}
		need, batch := w.minBatch(), w.cfg.BatchSize
		if w.pause.active() {
			need, batch = 1, 1 // a probe: one message, so an outage burns few receive counts
		}
		n, err := w.acquire(ctx, need, batch)
		if err != nil {
			return
		}
		// SQS counts the 12-hour cap of these deliveries from when it takes this request, which
		// is after this moment.
		requested := w.now()
		out, err := w.client.ReceiveMessage(w.recvCtx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &w.queue.URL,
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             w.cfg.waitSeconds(),
			VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
			MessageSystemAttributeNames: receiveAttributes,
			MessageAttributeNames:       allMessageAttributes,
		}, PlainRequestBodies)
		if err != nil {
			w.slots.Release(int64(n))
			if ctx.Err() != nil {
				return
			}
			fails++
			w.metrics.Add(ReceiveErrors, 1)
			d := jitter(expo(pollBackoffMin, pollBackoffMax, fails))
			w.log.Warn("worker: receive failed; backing off", "error", err, "code", errorCode(err), "backoff", d)
			if sleep(ctx, d) != nil {
				return
			}
			continue
		}
		fails = 0
		msgs := out.Messages
		if len(msgs) < n {
			w.slots.Release(int64(n - len(msgs)))
		}
		if len(msgs) == 0 {
			if w.cfg.WaitTime < 0 && sleep(ctx, shortPollIdle) != nil {
				return
			}
			continue
		}
		w.dispatch(msgs, n, requested)
	}
}

// minBatch is the number of free slots a poller waits for, at most gatherWait, before it
// receives: its share of Concurrency, up to BatchSize. Receiving for one slot at a time under load
// would multiply the ReceiveMessage calls per message; waiting long would leave slots idle.
func (w *Worker) minBatch() int {
	return max(1, min(w.cfg.BatchSize, w.cfg.Concurrency/w.cfg.Pollers))
}

// acquire takes one slot, waiting for it, then waits up to gatherWait for more until it holds
// need, and then takes as many more as are free now, up to batch.
func (w *Worker) acquire(ctx context.Context, need, batch int) (int, error) {
	if err := w.slots.Acquire(ctx, 1); err != nil {
		return 0, err
	}
	n := 1
	for n < batch && w.slots.TryAcquire(1) {
		n++
	}
	if n < need {
		gctx, cancel := context.WithTimeout(ctx, gatherWait)
		for n < need && w.slots.Acquire(gctx, 1) == nil {
			n++
		}
		cancel()
	}
	return n, nil
}

// dispatch starts the received messages, each holding one of the slots taken for the receive.
// On a FIFO queue, the messages of one group run in order in one goroutine.
// Every message's lease (its heartbeat) starts here, so that a message waiting for its turn is
// covered as a running one is.
func (w *Worker) dispatch(sms []types.Message, slots int, requested time.Time) {
	msgs := make([]*Message, 0, len(sms))
	for i := range sms {
		m := newMessage(&sms[i], requested)
		m.lease = w.startHeartbeat(m)
		msgs = append(msgs, m)
	}
	w.metrics.Add(Received, len(msgs))
	if len(msgs) > slots {
		// A server returned more than asked for; those have no slot.
		w.release(msgs[slots:])
		msgs = msgs[:slots]
	}
	if w.stopping.Load() {
		w.release(msgs)
		w.slots.Release(int64(len(msgs)))
		return
	}
	if !w.queue.FIFO {
		for _, m := range msgs {
			w.handlers.Add(1)
			go w.runOne(m)
		}
		return
	}
	for _, g := range groups(msgs) {
		w.handlers.Add(1)
		go w.runGroup(&group{rest: g})
	}
}

// group is the messages of one FIFO group from one receive, not yet started.
type group struct {
	mu       sync.Mutex
	rest     []*Message
	released bool
}

// next returns the next message to run, or nil when the group is done or was released.
func (g *group) next() *Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released || len(g.rest) == 0 {
		return nil
	}
	m := g.rest[0]
	g.rest = g.rest[1:]
	return m
}

// take empties the group and returns what it held.
func (g *group) take() []*Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := g.rest
	g.rest, g.released = nil, true
	return rest
}

// releasePending releases the messages of every FIFO group that have not started, at stop:
// they would wait behind the running one for nothing.
func (w *Worker) releasePending() {
	w.pendingMu.Lock()
	var all []*Message
	for g := range w.pending {
		all = append(all, g.take()...)
	}
	w.pendingMu.Unlock()
	w.release(all)
	w.slots.Release(int64(len(all)))
}

// groups splits msgs by MessageGroupId, keeping their order.
func groups(msgs []*Message) [][]*Message {
	var out [][]*Message
	idx := make(map[string]int, len(msgs))
	for _, m := range msgs {
		i, ok := idx[m.GroupID]
		if !ok {
			i = len(out)
			idx[m.GroupID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], m)
	}
	return out
}

func (w *Worker) runOne(m *Message) {
	defer w.handlers.Done()
	defer w.slots.Release(1)
	if w.stopping.Load() {
		w.release([]*Message{m})
		return
	}
	w.process(m)
}

func (w *Worker) runGroup(g *group) {
	defer w.handlers.Done()
	w.pendingMu.Lock()
	if w.pending == nil {
		w.pending = map[*group]struct{}{}
	}
	w.pending[g] = struct{}{}
	w.pendingMu.Unlock()
	defer func() {
		w.pendingMu.Lock()
		delete(w.pending, g)
		w.pendingMu.Unlock()
	}()
	for {
		if w.stopping.Load() {
			rest := g.take()
			w.release(rest)
			w.slots.Release(int64(len(rest)))
			return
		}
		m := g.next()
		if m == nil {
			return
		}
		ok := w.process(m)
		w.slots.Release(1)
		if !ok {
			// Later messages of the group must not overtake the failed one.
			rest := g.take()
			w.release(rest)
			w.slots.Release(int64(len(rest)))
			return
		}
	}
}

// process runs the handler on m and settles the message. It reports whether the message is done
// (deleted or to be deleted).
func (w *Worker) process(m *Message) bool {
	ctx, cancel := context.WithCancelCause(w.workCtx)
	if err := m.lease.attach(cancel); err != nil {
		// Held too long behind its group: its receipt handle is gone, and it will be delivered
		// again. Running it now could overlap that delivery.
		m.lease.stop()
		cancel(nil)
		w.log.Warn("worker: lease lost while the message waited for its turn; not running it", "message_id", m.ID, "cause", err)
		return false
	}
	w.metrics.SetInFlight(int(w.inFlight.Add(1)))
	start := time.Now()
	hb := m.lease
	hctx, cancelTimeout := ctx, context.CancelFunc(func() {})
	if w.cfg.HandlerTimeout > 0 {
		hctx, cancelTimeout = context.WithTimeoutCause(ctx, w.cfg.HandlerTimeout, ErrHandlerTimeout)
	}
	err := w.call(hctx, m)
	hb.stop()
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	w.metrics.Observe(HandlerDuration, time.Since(start))
	w.metrics.SetInFlight(int(w.inFlight.Add(-1)))
	return w.settle(m, err, cause)
}

func (w *Worker) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return w.cfg.Handler.Handle(ctx, m)
}

func (w *Worker) settle(m *Message, err error, cause error) bool {
	var (
		discard *DiscardError
		retry   *RetryError
		unavail *UnavailableError
		blocked *BlockedError
	)
	switch {
	case err == nil:
		w.pause.ok()
		w.metrics.Add(Processed, 1)
		w.del.add(m)
		return true
	case errors.Is(err, ErrDuplicate):
		w.pause.ok()
		w.metrics.Add(Duplicates, 1)
		w.del.add(m)
		return true
	case errors.As(err, &discard):
		w.pause.ok()
		w.metrics.Add(Discarded, 1)
		w.log.Warn("worker: message discarded by its handler", "message_id", m.ID, "reason", discard.Reason)
		w.del.add(m)
		return true
	}
	var d time.Duration
	switch {
	case errors.As(err, &blocked):
		// Not a failure of the handler: another consumer holds the event's claim. Wait for it
		// to commit (the redelivery is then a duplicate) or to be ended.
		w.pause.ok()
		w.metrics.Add(Blocked, 1)
		w.log.Info("worker: event held by another consumer; retrying later", "message_id", m.ID,
			"receive_count", m.ReceiveCount, "retry_in", blocked.After.Round(time.Second), "reason", blocked.Err)
		d = blocked.After
	case errors.As(err, &retry):
		d = retry.After
	default:
		w.metrics.Add(Failed, 1)
		d = w.cfg.Backoff(m.ReceiveCount)
	}
	if errors.As(err, &unavail) {
		// Keep the message away at least as long as the pause, so that the next probe is
		// another message and no single one runs up its receive count.
		d = max(d, w.pause.fail(w.log))
	}
	switch {
	case errors.Is(cause, ErrLeaseLost):
		// The receipt handle is no longer ours: leave the message to its next delivery.
		w.log.Warn("worker: handler stopped: lease lost", "message_id", m.ID, "cause", cause, "error", err)
		return false
	case errors.Is(cause, ErrStopping):
		d = 0
	}
	if retry == nil && blocked == nil {
		w.log.Warn("worker: handler failed; the message will be delivered again", "message_id", m.ID,
			"receive_count", m.ReceiveCount, "retry_in", d.Round(time.Second), "error", err)
	}
	w.metrics.Add(Retried, 1)
	w.changeVisibility(m, d)
	return false
}

// visibilitySeconds turns a delay into a visibility timeout that SQS accepts for m: whole seconds
// (rounded up), not past 12 hours from the receive that delivered it.
func visibilitySeconds(m *Message, d time.Duration, now time.Time) int32 {
	left := max(leaseCap(m).Sub(now), 0)
	d = clampDur(d, 0, left)
	return int32((d + time.Second - 1) / time.Second)
}

func (w *Worker) changeVisibility(m *Message, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.workCtx), callTimeout)
	defer cancel()
	_, err := w.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          &w.queue.URL,
		ReceiptHandle:     &m.ReceiptHandle,
		VisibilityTimeout: visibilitySeconds(m, d, w.now()),
	}, PlainRequestBodies)
	if err != nil && !isGone(err, w.queue.FIFO) {
		w.log.Warn("worker: could not change a message's visibility; it returns after the visibility timeout",
			"message_id", m.ID, "error", err)
	}
}

// release makes msgs visible again at once, without running them. Their leases end first, so
// that no extension lands after the release.
func (w *Worker) release(msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	for _, m := range msgs {
		m.lease.stop()
	}
	w.released.Add(int64(len(msgs)))
	w.metrics.Add(Released, len(msgs))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.workCtx), callTimeout)
	defer cancel()
	for len(msgs) > 0 {
		n := min(len(msgs), MaxBatchSize)
		batch := msgs[:n]
		msgs = msgs[n:]
		if !w.noCMVB.Load() && len(batch) > 1 {
			entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
			for i, m := range batch {
				entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
					Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle),
				}
			}
			out, err := w.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
				QueueUrl: &w.queue.URL, Entries: entries,
			}, PlainRequestBodies)
			if err == nil {
				var failed []*Message
				for _, f := range out.Failed {
					if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(batch) && !goneCode(aws.ToString(f.Code), w.queue.FIFO) {
						failed = append(failed, batch[i])
					}
				}
				batch = failed
			} else if ctx.Err() == nil {
				// GoAws does not implement the batch call; use single calls from now on.
				w.noCMVB.Store(true)
				w.log.Debug("worker: ChangeMessageVisibilityBatch failed; using single calls", "error", err)
			}
		}
		for _, m := range batch {
			_, err := w.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
				QueueUrl: &w.queue.URL, ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: 0,
			}, PlainRequestBodies)
			if err != nil && !isGone(err, w.queue.FIFO) {
				w.log.Warn("worker: could not release a message; it returns after the visibility timeout", "message_id", m.ID, "error", err)
			}
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pauser pauses all pollers while a dependency is unavailable.
type pauser struct {
	fails atomic.Int64
	mu    sync.Mutex
	until time.Time
}

// fail starts a pause, unless one is on, and returns how long the pause lasts from now.
func (p *pauser) fail(log *slog.Logger) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Before(p.until) {
		return p.until.Sub(now) // already paused
	}
	n := p.fails.Add(1)
	d := jitter(expo(pauseBackoffMin, pauseBackoffMax, int(n)))
	p.until = now.Add(d)
	log.Warn("worker: a dependency is unavailable; pausing receives", "pause", d, "consecutive", n)
	return d
}

// active reports whether the last results said the dependency is unavailable.
func (p *pauser) active() bool { return p.fails.Load() > 0 }

func (p *pauser) ok() {
	if p.fails.Load() == 0 {
		return
	}
	p.mu.Lock()
	p.fails.Store(0)
	p.until = time.Time{}
	p.mu.Unlock()
}

func (p *pauser) wait(ctx context.Context) error {
	if p.fails.Load() == 0 {
		return ctx.Err()
	}
	p.mu.Lock()
	d := time.Until(p.until)
	p.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, d)
}
