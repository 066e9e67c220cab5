package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// lease keeps one received message invisible, with a heartbeat. It starts when the message is
// received, not when its handler starts, so that a message held for later (behind the running
// head of its FIFO group) stays invisible as long as the running one does: otherwise it would
// lapse, be received again by another poller, and run twice and out of order.
//
// Its heartbeat extends the message's visibility every third of the visibility timeout. When it cannot (the
// receipt handle is gone, or the 12-hour cap of this receive is near), the lease is lost: a
// running handler is cancelled with [ErrLeaseLost]; a held message is marked lost, so that it is
// not started. A failed extension is retried with exponential backoff and jitter from
// heartbeatRetry up to the interval, always leaving a last try before the lease ends; the first
// failure of a run is logged as a warning, the rest at debug level.
//
// SQS's 12-hour cap. SQS keeps a received message invisible for at most 12 hours
// ([MaxVisibility]), counted from the moment it took the ReceiveMessage request that delivered it:
// no visibility timeout is longer, and a ChangeMessageVisibility that would keep the message
// invisible past that moment plus 12 hours is refused (InvalidParameterValue). Each receive starts
// its own 12 hours; the message's first receive ever (ApproximateFirstReceiveTimestamp,
// Message.FirstReceived) does not matter. The worker cannot know when SQS took the request, so it
// counts from Message.Received, the local time taken just before the ReceiveMessage call, which is
// no later (a long poll returns up to 20 s after it), and stays capMargin (5 s) short of that, for
// clock skew and the call's own travel: leaseCap. Every visibility change the worker asks for
// stays inside it: each extension here, and each delayed redelivery (a retry's delay, a delayed
// release: visibilitySeconds). Once less than a second is left, the heartbeat cannot extend and
// the lease is lost; the message comes back with a new receive and a new 12 hours. The clock (now)
// is the worker's, which tests move to reach the cap without waiting. Other comments point here
// ("the 12-hour cap: see lease.go"); docs/how-it-works.md explains the cap to users.
type lease struct {
	sw  *sqsWriter
	m   *Message         // for its receipt handle and receive time
	vis time.Duration    // each extension's length
	now func() time.Time // the clock of the 12-hour cap

	maxHold   time.Duration // how long the message may wait for its handler (Config.MaxHold); 0: the fair queue decides
	heldSince time.Time

	mu         sync.Mutex
	stopped    bool
	cancel     context.CancelCauseFunc // the running handler's, once it has started
	lost       error                   // why the lease was lost, or nil
	timer      *time.Timer
	callCancel context.CancelFunc
	running    sync.WaitGroup
	leaseUntil time.Time
	interval   time.Duration
	fails      int // failed extensions since the last success
}

// heartbeatRetry is the delay before a failed extension is tried again.
const heartbeatRetry = time.Second

// startLease starts the lease of a message just received, extending it by vis every third of
// vis.
func startLease(sw *sqsWriter, m *Message, vis time.Duration, now func() time.Time, maxHold time.Duration) *lease {
	h := &lease{sw: sw, m: m, vis: vis, now: now, interval: max(vis/3, 100*time.Millisecond),
		maxHold: maxHold, heldSince: time.Now()}
	h.leaseUntil = m.Received.Add(vis)
	h.mu.Lock()
	h.timer = time.AfterFunc(h.interval, h.beat)
	h.mu.Unlock()
	return h
}

// attach hands the lease to the handler that starts now: if the lease is lost from here on,
// cancel is called. It returns the reason if the lease is already lost; the handler must then
// not run.
func (h *lease) attach(cancel context.CancelCauseFunc) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	h.cancel = cancel
	return nil
}

// lostErr returns why the lease was lost, or nil.
func (h *lease) lostErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// errHeldTooLong is the reason of a lease given up because its message waited Config.MaxHold for
// a handler; the heartbeat has released the message.
var errHeldTooLong = errors.New("worker: message held too long without a free handler")

// stop stops the heartbeat and waits for an extension in progress. After it returns, nothing
// changes the message's visibility on the lease's behalf.
func (h *lease) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	if h.callCancel != nil {
		h.callCancel()
	}
	h.mu.Unlock()
	h.running.Wait()
}

// keep keeps the lease of a parked message (see pause.go) and reports whether it could: its
// heartbeat goes on (or again, after stop, with no handler attached), and MaxHold no longer
// applies, since no handler could run the message in the outage. A lost lease cannot be kept.
func (h *lease) keep() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return false
	}
	h.maxHold, h.cancel = 0, nil
	if h.stopped {
		h.stopped = false
		h.timer.Reset(h.interval)
	}
	return true
}

// lose records that the lease is lost and cancels the running handler, if any; h.mu must be held.
func (h *lease) lose(err error) {
	h.lost = err
	if h.cancel != nil {
		h.cancel(err)
	}
}

func (h *lease) beat() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	if h.cancel == nil && h.maxHold > 0 && time.Since(h.heldSince) >= h.maxHold {
		// Still waiting for a handler after MaxHold: hand it back to the queue, and never run it.
		// Its delivery ends when a runner takes it and finds the lease lost.
		h.lost = fmt.Errorf("%w (Config.MaxHold %v)", errHeldTooLong, h.maxHold)
		h.stopped = true
		h.timer.Stop()
		h.mu.Unlock()
		h.sw.release([]*Message{h.m})
		return
	}
	h.running.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	h.callCancel = cancel
	h.mu.Unlock()
	defer h.running.Done()
	defer cancel()

	sw := h.sw
	now := h.now()
	ext := min(h.vis, leaseCap(h.m).Sub(now))
	if ext < time.Second {
		h.mu.Lock()
		h.lose(fmt.Errorf("%w: SQS's 12-hour visibility limit from this receive is reached", ErrLeaseLost))
		h.mu.Unlock()
		return
	}
	secs := int32(ext / time.Second) // rounded down, to stay under the cap
	err := sw.extend(ctx, h.m, secs)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	switch {
	case err == nil:
		sw.metrics.Add(Heartbeats, 1)
		if h.fails > 0 {
			sw.log.Info("worker: heartbeat recovered", "message_id", h.m.ID, "failed_attempts", h.fails)
			h.fails = 0
		}
		h.leaseUntil = now.Add(time.Duration(secs) * time.Second)
		h.timer.Reset(h.interval)
	case sw.gone(err) || errorCode(err) == "InvalidParameterValue":
		h.lose(fmt.Errorf("%w: %w", ErrLeaseLost, err))
	case h.now().Add(2 * heartbeatRetry).After(h.leaseUntil):
		h.lose(fmt.Errorf("%w: the visibility could not be extended in time: %w", ErrLeaseLost, err))
	default:
		h.fails++
		left := h.leaseUntil.Sub(h.now())
		// Back off, but try once more before the lease is down to its last 2 s.
		d := min(jitter(expo(heartbeatRetry, h.interval, h.fails)), left-2*heartbeatRetry)
		level := slog.LevelDebug
		if h.fails == 1 {
			level = slog.LevelWarn
		}
		sw.log.Log(context.Background(), level, "worker: heartbeat failed; retrying", "message_id", h.m.ID,
			"attempt", h.fails, "retry_in", d.Round(time.Millisecond), "lease_left", left.Round(time.Second), "error", err)
		h.timer.Reset(d)
	}
}
