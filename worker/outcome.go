package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
)

// The outcome of one message: run its handler under its lease, then settle the message as the
// handler's result says (delete, retry after a delay, or leave it to its next delivery).

// process runs the handler on m and settles the message. It reports whether the message is done
// (deleted or to be deleted).
func (w *Worker) process(m *Message) bool {
	ctx, cancel := context.WithCancelCause(w.workCtx)
	if m.refused != nil || m.lease.attach(cancel) != nil {
		cancel(nil)
		return w.notStarted(m)
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

// notStarted settles a message that does not reach its handler: refused before it, or its lease
// lost while it waited for its turn.
func (w *Worker) notStarted(m *Message) bool {
	m.lease.stop()
	if m.refused != nil {
		// A malformed SNS envelope, or not a Notification: it goes the retry-then-DLQ way like a
		// failure, and the handler never sees it.
		return w.settle(m, m.refused, nil)
	}
	err := m.lease.lostErr()
	if errors.Is(err, errHeldTooLong) {
		return false // the heartbeat released it
	}
	// Its receipt handle is gone (or the 12-hour cap is near), and it will be delivered again.
	// Running it now could overlap that delivery.
	w.metrics.Add(LeasesLost, 1)
	w.log.Log(context.Background(), w.leaseLost.level(), "worker: lease lost while the message waited for its turn; not running it",
		"message_id", m.ID, "cause", err)
	return false
}

func (w *Worker) call(ctx context.Context, m *Message) (err error) {
	// Not panics.Call: its closure costs each handler goroutine a deeper stack.
	defer func() {
		if v := recover(); v != nil {
			err = panics.Recovered(v)
		}
	}()
	return w.cfg.Handler.Handle(ctx, m)
}

func (w *Worker) settle(m *Message, err error, cause error) bool {
	w.progress.Store(time.Now().UnixNano())
	var (
		discard *DiscardError
		retry   *RetryError
		unavail *UnavailableError
		blocked *BlockedError
	)
	switch {
	case err == nil:
		w.pause.ok(w.log)
		w.lastCommit.Store(time.Now().UnixNano())
		w.metrics.Add(Processed, 1)
		w.del.add(m)
		return true
	case errors.Is(err, ErrDuplicate):
		w.pause.ok(w.log)
		w.lastCommit.Store(time.Now().UnixNano())
		w.metrics.Add(Duplicates, 1)
		w.del.add(m)
		return true
	case errors.As(err, &discard):
		w.pause.ok(w.log)
		w.metrics.Add(Discarded, 1)
		w.log.Warn("worker: message discarded by its handler", "message_id", m.ID, "reason", discard.Reason)
		w.del.add(m)
		return true
	}
	if errors.Is(err, ErrNotRun) {
		// Not run for a reason outside it (an earlier message of its FIFO group failed, or its
		// event's twin in the batch did not commit): back to the queue at once.
		w.sw.release([]*Message{m})
		return false
	}
	var (
		d      time.Duration
		broken *DeploymentError
	)
	switch {
	case errors.As(err, &blocked):
		// Not a failure of the handler: another consumer holds the event's claim. Wait for it
		// to commit (the redelivery is then a duplicate) or to be ended.
		w.pause.ok(w.log)
		w.metrics.Add(Blocked, 1)
		w.log.Info("worker: event held by another consumer; retrying later", "message_id", m.ID,
			"receive_count", m.ReceiveCount, "retry_in", blocked.After.Round(time.Second), "reason", blocked.Err)
		d = blocked.After
	case errors.As(err, &retry):
		d = retry.After
	case errors.As(err, &broken):
		// Not a failure of the message: every message would meet the same broken deployment.
		w.metrics.Add(BrokenDeployments, 1)
	default:
		w.metrics.Add(Failed, 1)
		d = w.cfg.Backoff(m.ReceiveCount)
	}
	if errors.As(err, &unavail) || broken != nil {
		// Keep the message away past the next pause too (pauses grow about twofold), so that the
		// next probe is another message and no single one runs up its receive count: kept away
		// only as long as this pause, a failed probe came back just as the next probe was made,
		// and on a server that returns the oldest visible message first (GoAws) it was probed
		// again and again (postgres-restart once dead-lettered a message so, maxReceiveCount 10).
		d = max(d, 3*w.pause.fail(w.log, err, broken != nil)+time.Second)
	}
	switch {
	case errors.Is(cause, ErrLeaseLost):
		// The receipt handle is no longer ours: leave the message to its next delivery.
		w.metrics.Add(LeasesLost, 1)
		w.log.Log(context.Background(), w.leaseLost.level(), "worker: handler stopped: lease lost (later ones within a minute are logged at debug level)",
			"message_id", m.ID, "cause", cause, "error", err)
		return false
	case errors.Is(cause, ErrStopping):
		d = 0
	}
	if retry == nil && blocked == nil {
		level := slog.LevelWarn
		if unavail != nil || broken != nil {
			level = slog.LevelDebug // the pause's own line says it once
		}
		w.log.Log(context.Background(), level, "worker: message failed; it will be delivered again", "message_id", m.ID,
			"receive_count", m.ReceiveCount, "retry_in", d.Round(time.Second), "error", err)
	}
	w.metrics.Add(Retried, 1)
	w.sw.changeVisibility(m, visibilitySeconds(m, d, w.now()))
	return false
}

// visibilitySeconds turns a delay into a visibility timeout that SQS accepts for m: whole seconds
// (rounded up), not past 12 hours from the receive that delivered it.
func visibilitySeconds(m *Message, d time.Duration, now time.Time) int32 {
	left := max(leaseCap(m).Sub(now), 0)
	d = clampDur(d, 0, left)
	return int32((d + time.Second - 1) / time.Second)
}
