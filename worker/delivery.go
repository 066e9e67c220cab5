package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/semaphore"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
)

// A delivery is one received message from its receive to its end. It owns what the message holds
// in the worker: a slot of the worker's capacity, a lease (the heartbeat that keeps it invisible),
// its place in its FIFO group, and whether it is held (received, not started). Pollers create
// deliveries and runners schedule them; only the delivery ends itself, exactly once, through
// settle (a handler's result, mapped to an SQS action by one table, disposition) or release (not
// run: visible again at once). Ending frees its slot and, when the message is not done, halts the
// rest of its FIFO group.
type delivery struct {
	e       *engine // nil for a batch run without a worker (RunBatch)
	m       *Message
	lease   *lease    // nil without a worker
	arrived time.Time // when the ReceiveMessage call that returned it came back (HeldWait counts from here)
	refused error     // why the message cannot reach its handler (a malformed SNS envelope, a payload not fetched), or nil
	group   *group    // on a FIFO queue, the messages of its group from the same receive
	pos     int       // its place in group
	held    bool      // counted as held: received and not yet taken by a runner
	spare   bool      // holds a slot of e.spare (received by probeFair), not of e.slots
	probe   bool      // a parked delivery run as the pause's probe (pause.go)
	kept    bool      // parked in its FIFO group, or kept by its runner, in a pause (holdGroups)
	ended   bool
}

// engine is what the deliveries of one worker share: its capacity, SQS writes, pause, metrics and
// logs. The Worker owns it; deliveries only use it.
type engine struct {
	cfg       *Config
	work      context.Context // handlers' contexts descend from it; a hard stop cancels it
	vis       time.Duration   // the visibility timeout in force
	queue     string          // the queue's name, for Message.Queue
	maxRecv   int             // the queue's maxReceiveCount (0: no redrive policy), for the failure's log line
	sw        *sqsWriter
	del       *deleter
	slots     *semaphore.Weighted
	spare     *semaphore.Weighted // with Config.MaxPerGroup: the slots of probeFair's receives
	fairHold  bool                // a fairQueue, not the leases, bounds the held deliveries' wait (expire)
	held      atomic.Int64        // deliveries received and not yet taken by a runner
	inFlight  atomic.Int64        // messages whose handlers run
	pause     pauser
	parked    parking // its ready is nil where nothing is parked there (FIFO queues, MaxPerGroup)
	metrics   Metrics
	log       *slog.Logger
	now       func() time.Time // the clock of the 12-hour cap; tests move it
	leaseLost episodeLog       // lease-lost lines: one warning per episode

	// parkGroups: a FIFO queue without MaxPerGroup parks a message in its group (parkInGroup),
	// and its runner keeps the group through the pause.
	parkGroups bool

	settled    atomic.Int64 // deliveries settled (the sizer's rate)
	runNanos   atomic.Int64 // the runners' time in handler calls (the sizer's gradient)
	runMsgs    atomic.Int64 // the messages of those calls
	lastCommit atomic.Int64 // unix nanoseconds of the last message processed or found a duplicate
	progress   atomic.Int64 // of the last sign of life: a poll loop, a heartbeat, a settled message
}

// receive makes a delivery of a message just received, which holds one of the slots taken for
// its receive. Its lease starts here, so that a message waiting for its turn is covered as a
// running one is.
func (e *engine) receive(sm *types.Message, requested, arrived time.Time) *delivery {
	m := newMessage(sm, requested)
	m.Queue = e.queue
	d := &delivery{e: e, m: m, arrived: arrived, held: true}
	d.refused = UnwrapSNS(m, e.cfg.SNS)
	if d.refused == nil {
		d.refused = offloadRefusal(m, e.cfg.Payloads)
	}
	maxHold := e.cfg.MaxHold
	if e.fairHold || e.maxRecv > 0 && m.ReceiveCount >= e.maxRecv {
		// The fair queue decides its own waits; and a message on its last receive is never given
		// back for waiting, which would dead-letter it without its ever having run.
		maxHold = 0
	}
	d.lease = startLease(e.sw, m, e.vis, e.now, maxHold)
	e.held.Add(1)
	return d
}

// take is a runner taking the delivery from the ready queue: it is no longer held.
func (d *delivery) take(now time.Time) {
	if d.held {
		d.held = false
		d.e.held.Add(-1)
		d.e.metrics.Observe(HeldWait, now.Sub(d.arrived))
	}
}

// behind reports whether the delivery must not run: it comes after a message of its FIFO group
// that is not done.
func (d *delivery) behind() bool { return d.group != nil && d.group.behind(d) }

// start hands the delivery's lease to the work that starts now, whose context is a child of
// parent: from here on a lost lease cancels it (cause ErrLeaseLost). It returns false, with the
// context cancelled, when the delivery must not run: the lease is already lost.
func (d *delivery) start(parent context.Context) (context.Context, context.CancelCauseFunc, bool) {
	ctx, cancel := context.WithCancelCause(parent)
	if d.lease != nil && d.lease.attach(cancel) != nil {
		cancel(nil)
		return nil, nil, false
	}
	return ctx, cancel, true
}

// run runs h on the delivery's message with the handler timeout and settles it.
func (d *delivery) run(h Handler) {
	if d.refused != nil || d.behind() {
		d.notStarted()
		return
	}
	ctx, cancel, ok := d.start(d.e.work)
	if !ok {
		d.notStarted()
		return
	}
	e := d.e
	e.metrics.SetInFlight(int(e.inFlight.Add(1)))
	start := time.Now()
	hctx, cancelTimeout := ctx, context.CancelFunc(func() {})
	if e.cfg.HandlerTimeout > 0 {
		hctx, cancelTimeout = context.WithTimeoutCause(ctx, e.cfg.HandlerTimeout, ErrHandlerTimeout)
	}
	err := call(hctx, h, d.m)
	d.lease.stop()
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	e.metrics.Observe(HandlerDuration, time.Since(start))
	e.metrics.SetInFlight(int(e.inFlight.Add(-1)))
	d.settle(err, cause)
}

func call(ctx context.Context, h Handler, m *Message) (err error) {
	// Not panics.Call: its closure costs each handler goroutine a deeper stack.
	defer func() {
		if v := recover(); v != nil {
			err = panics.Recovered(v)
		}
	}()
	return h.Handle(ctx, m)
}

// notStarted settles a delivery that does not reach its handler: behind a message of its FIFO
// group not done, refused before the handler (a malformed SNS envelope), or its lease lost while
// it waited for its turn.
func (d *delivery) notStarted() {
	switch {
	case d.behind():
		d.settle(errGroupHalted, nil)
	case d.refused != nil:
		// A malformed SNS envelope, or not a Notification: it goes the retry-then-DLQ way like a
		// failure, and the handler never sees it.
		d.settle(d.refused, nil)
	default:
		err := d.lease.lostErr()
		if !errors.Is(err, errHeldTooLong) { // the lease released that one itself
			// Its receipt handle is gone (or the 12-hour cap is near), and it will be delivered
			// again. Running it now could overlap that delivery.
			d.e.metrics.Add(LeasesLost, 1)
			d.e.log.Log(context.Background(), d.e.leaseLost.level(), "worker: lease lost while the message waited for its turn; not running it",
				"message_id", d.m.ID, "cause", err)
		}
		d.end(false)
	}
}

// release makes the message visible again at once, without running it, and ends the delivery.
func (d *delivery) release() { releaseAll([]*delivery{d}) }

// releaseAll releases deliveries with as few SQS calls as their number allows.
func releaseAll(ds []*delivery) { releaseAllAfter(ds, 0) }

// releaseAllAfter releases deliveries to come back after delay, with as few SQS calls as their
// number allows.
func releaseAllAfter(ds []*delivery, delay time.Duration) {
	if len(ds) == 0 {
		return
	}
	msgs := make([]*Message, len(ds))
	for i, d := range ds {
		d.lease.stop() // no extension may land after the release
		msgs[i] = d.m
	}
	e := ds[0].e
	e.sw.releaseAfter(msgs, delay, e.now())
	for _, d := range ds {
		d.end(false)
	}
}

// halt applies the FIFO rule to a delivery that is not done: the later messages of its group that
// the worker still holds are released (they must not overtake it), and those already in a batch
// are not run (Batch.Runnable).
func (d *delivery) halt() {
	if d.group != nil {
		releaseAll(d.group.halt(d))
	}
}

// end frees the delivery's slot (and its place among the held ones), and halts its FIFO group
// unless the message is done. A delivery ends once.
func (d *delivery) end(done bool) {
	if d.ended {
		return
	}
	d.ended = true
	if d.probe {
		// A parked probe that ended without a result (its lease was lost): the next may run.
		d.probe = false
		d.e.pause.probeDone()
	}
	if !done {
		d.halt()
	}
	if d.e == nil {
		return
	}
	if d.held {
		d.held = false
		d.e.held.Add(-1)
	}
	if d.spare {
		d.e.spare.Release(1)
	} else {
		d.e.slots.Release(1)
	}
}

// action is what a handler's result does to its message in SQS.
type action int

const (
	actDelete  action = iota // done: deleted in a batch
	actRetry                 // visible again after a delay (the receive count grows)
	actRelease               // not run: visible again at once
	actLeave                 // nothing: the receipt handle is no longer ours; it comes back by itself
)

// pauseEffect is what a result does to the pause of the pollers.
type pauseEffect int

const (
	pauseNone   pauseEffect = iota
	pauseEnd                // a success: the dependency is back
	pauseOutage             // Unavailable: a dependency every message needs is down
	pauseBroken             // BrokenDeployment
)

// disposition is one row of the table of handler results: what the result does to the message,
// the counters, the pause and the log.
type disposition struct {
	act   action
	delay time.Duration // for actRetry
	count Counter       // counted once, if set
	pause pauseEffect
	done  bool       // the message is done (its FIFO group goes on)
	lost  bool       // its lease was lost while it ran: counted in LeasesLost too
	last  bool       // failed on its last receive: the delay is logged as dead_letter_in
	level slog.Level // for the log line, if msg is set
	msg   string
	attrs []any
}

// dispose is the table: what the result err of message m (and the cause with which its context
// ended, if it did) comes to. Handler documents it for users.
func (e *engine) dispose(m *Message, err, cause error) disposition {
	var (
		discard *DiscardError
		retry   *RetryError
		unavail *UnavailableError
		blocked *BlockedError
		broken  *DeploymentError
	)
	var d disposition
	switch {
	case err == nil:
		d = disposition{act: actDelete, count: Processed, pause: pauseEnd, done: true}
	case errors.Is(err, ErrDuplicate):
		d = disposition{act: actDelete, count: Duplicates, pause: pauseEnd, done: true}
	case errors.As(err, &discard):
		d = disposition{act: actDelete, count: Discarded, pause: pauseEnd, done: true,
			level: slog.LevelWarn, msg: "worker: message discarded by its handler", attrs: []any{"reason", discard.Reason}}
	case errors.Is(err, ErrNotRun):
		// Not run for a reason outside it (an earlier message of its FIFO group not done, or its
		// event's twin in the batch not committed): back to the queue at once.
		return disposition{act: actRelease}
	case errors.As(err, &blocked):
		// Not a failure of the handler: another consumer holds the event's claim. Wait for it to
		// commit (the redelivery is then a duplicate) or to be ended.
		d = disposition{act: actRetry, delay: blocked.After, count: Blocked, pause: pauseEnd,
			level: slog.LevelInfo, msg: "worker: event held by another consumer; retrying later",
			attrs: []any{"receive_count", m.ReceiveCount, "retry_in", blocked.After.Round(time.Second), "reason", blocked.Err}}
	case errors.As(err, &retry):
		d = disposition{act: actRetry, delay: retry.After}
	case errors.As(err, &broken):
		// Not a failure of the message: every message would meet the same broken deployment.
		d = disposition{act: actRetry, count: BrokenDeployments, pause: pauseBroken, level: slog.LevelDebug}
	case errors.As(err, &unavail):
		d = disposition{act: actRetry, delay: e.cfg.Backoff(m.ReceiveCount), count: Failed, pause: pauseOutage, level: slog.LevelDebug}
	default:
		d = disposition{act: actRetry, delay: e.cfg.Backoff(m.ReceiveCount), count: Failed, level: slog.LevelWarn}
	}
	if d.act == actRetry && d.msg == "" && retry == nil {
		// A failure: the pause's own line says it once for an outage or a broken deployment.
		d.msg = "worker: message failed; it will be delivered again"
		if e.maxRecv > 0 && m.ReceiveCount >= e.maxRecv {
			// SQS moves it to the DLQ instead of delivering it again once it is visible.
			d.msg, d.last = "worker: message failed on its last receive; it will be dead-lettered next", true
		}
		d.attrs = []any{"receive_count", m.ReceiveCount, "max_receive_count", e.maxRecv, "error", err}
	}
	switch {
	case errors.Is(cause, ErrLeaseLost) && !d.done:
		// The receipt handle is no longer ours: leave the message to its next delivery. The
		// result still counts as what it was (a failure, say), and the lost lease besides.
		d.act, d.lost, d.level = actLeave, true, e.leaseLost.level()
		d.msg = "worker: handler stopped: lease lost (later ones within a minute are logged at debug level)"
		d.attrs = []any{"cause", cause, "error", err}
	case errors.Is(cause, ErrStopping) && d.act == actRetry:
		d.delay = 0
	}
	return d
}

// settle ends the delivery as its handler's result err says (cause: why its context ended, if it
// did), by the table of dispose.
func (d *delivery) settle(err, cause error) {
	e := d.e
	if e == nil {
		d.end(err == nil || errors.Is(err, ErrDuplicate))
		return
	}
	e.progress.Store(time.Now().UnixNano())
	e.settled.Add(1)
	t := e.dispose(d.m, err, cause)
	if d.probe {
		d.probe = false
		defer e.pause.probeDone() // after its result has ended the pause, or begun the next
	}
	if t.act == actRelease && d.group != nil && d.group.parkedBefore(d) && e.parkInGroup(d, true) {
		return // it waits, leased, behind the parked one of its FIFO group
	}
	switch t.pause {
	case pauseEnd:
		e.pause.ok(e.log)
		e.parked.unpark()
	case pauseOutage:
		if e.parkable(d, t, cause) && (d.group == nil && e.parked.park(d) || d.group != nil && e.parkInGroup(d, true)) {
			// Kept, leased, to run again when the dependency is back: no receive is spent.
			e.pause.fail(e.log, err, false, pauseParkedMax)
			e.metrics.Add(t.count, 1)
			e.log.Debug("worker: message parked until the dependency is back", "message_id", d.m.ID,
				"receive_count", d.m.ReceiveCount, "error", err)
			return
		}
		fallthrough
	case pauseBroken:
		// Keep the message away past the next pause too (pauses grow about twofold), so that the
		// next probe is another message and no single one runs up its receive count: kept away
		// only as long as this pause, a failed probe came back just as the next probe was made,
		// and on a server that returns the oldest visible message first (GoAws) it was probed
		// again and again (postgres-restart once dead-lettered a message so, maxReceiveCount 10).
		t.delay = max(t.delay, 3*e.pause.fail(e.log, err, t.pause == pauseBroken, pauseBackoffMax)+time.Second)
	}
	if t.done {
		e.lastCommit.Store(time.Now().UnixNano())
	}
	if t.count != "" {
		e.metrics.Add(t.count, 1)
	}
	if t.lost {
		e.metrics.Add(LeasesLost, 1)
	}
	if t.msg != "" {
		attrs := append([]any{"message_id", d.m.ID}, t.attrs...)
		if t.act == actRetry {
			key := "retry_in"
			if t.last {
				key = "dead_letter_in" // not retried: SQS moves it to the DLQ once it is visible again
			}
			attrs = append(attrs, key, t.delay.Round(time.Second))
		}
		e.log.Log(context.Background(), t.level, t.msg, attrs...)
	}
	switch t.act {
	case actDelete:
		e.del.add(d.m)
	case actRetry:
		e.metrics.Add(Retried, 1)
		e.sw.changeVisibility(d.m, visibilitySeconds(d.m, t.delay, e.now()))
	case actRelease:
		d.release()
		return
	}
	d.end(t.done)
}

// parkable reports whether d, whose result came to t (its context ended with cause, if it did),
// may be parked in the pause: on a worker that parks (in the parking, or in its FIFO group), not
// at a stop, and still leased.
func (e *engine) parkable(d *delivery, t disposition, cause error) bool {
	parks := e.parked.ready != nil && d.group == nil || e.parkGroups && d.group != nil
	return parks && t.act == actRetry && d.lease != nil && d.refused == nil && !errors.Is(cause, ErrStopping)
}

// parkInGroup parks d in its FIFO group (group.park; first: it failed for the outage, or waits
// behind one that did) and reports whether it could: not at a stop, nor when its lease is lost.
// Its runner keeps the group and runs it again once the pause ends (Worker.holdGroups).
func (e *engine) parkInGroup(d *delivery, first bool) bool {
	if !e.parkGroups || e.parked.isClosed() || !d.lease.keep() {
		return false
	}
	d.kept = true
	d.group.park(d, first)
	return true
}

// visibilitySeconds turns a delay into a visibility timeout that SQS accepts for m: whole seconds
// (rounded up), not past leaseCap (the 12-hour cap: see lease.go).
func visibilitySeconds(m *Message, d time.Duration, now time.Time) int32 {
	left := max(leaseCap(m).Sub(now), 0)
	d = clampDur(d, 0, left)
	return int32((d + time.Second - 1) / time.Second)
}
