package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// heartbeat extends a running message's visibility every third of the visibility timeout. When
// it cannot (the receipt handle is gone, or the 12-hour cap is near), it cancels the handler
// with [ErrLeaseLost]. A failed extension is retried with exponential backoff and jitter from
// heartbeatRetry up to the interval, always leaving a last try before the lease ends; the first
// failure of a run is logged as a warning, the rest at debug level.
type heartbeat struct {
	w      *Worker
	m      *Message
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	stopped    bool
	timer      *time.Timer
	callCancel context.CancelFunc
	running    sync.WaitGroup
	leaseUntil time.Time
	interval   time.Duration
	fails      int // failed extensions since the last success
}

// heartbeatRetry is the delay before a failed extension is tried again.
const heartbeatRetry = time.Second

func (w *Worker) startHeartbeat(m *Message, cancel context.CancelCauseFunc) *heartbeat {
	h := &heartbeat{w: w, m: m, cancel: cancel, interval: max(w.vis/3, 100*time.Millisecond)}
	h.leaseUntil = m.Received.Add(w.vis)
	h.mu.Lock()
	h.timer = time.AfterFunc(h.interval, h.beat)
	h.mu.Unlock()
	return h
}

// stop stops the heartbeat and waits for an extension in progress.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	if h.callCancel != nil {
		h.callCancel()
	}
	h.mu.Unlock()
	h.running.Wait()
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.running.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	h.callCancel = cancel
	h.mu.Unlock()
	defer h.running.Done()
	defer cancel()

	w := h.w
	now := time.Now()
	ext := min(w.vis, h.m.FirstReceived.Add(MaxVisibility-capMargin).Sub(now))
	if ext < time.Second {
		h.cancel(fmt.Errorf("%w: SQS's 12-hour visibility limit from the first receive is reached", ErrLeaseLost))
		return
	}
	secs := int32(ext / time.Second) // rounded down, to stay under the cap
	_, err := w.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          &w.queue.URL,
		ReceiptHandle:     &h.m.ReceiptHandle,
		VisibilityTimeout: secs,
	}, PlainRequestBodies)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	switch {
	case err == nil:
		w.metrics.Add(Heartbeats, 1)
		if h.fails > 0 {
			w.log.Info("worker: heartbeat recovered", "message_id", h.m.ID, "failed_attempts", h.fails)
			h.fails = 0
		}
		h.leaseUntil = now.Add(time.Duration(secs) * time.Second)
		h.timer.Reset(h.interval)
	case isGone(err) || errorCode(err) == "InvalidParameterValue":
		h.cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
	case time.Until(h.leaseUntil) <= 2*heartbeatRetry:
		h.cancel(fmt.Errorf("%w: the visibility could not be extended in time: %w", ErrLeaseLost, err))
	default:
		h.fails++
		// Back off, but try once more before the lease is down to its last 2 s.
		d := min(jitter(expo(heartbeatRetry, h.interval, h.fails)), time.Until(h.leaseUntil)-2*heartbeatRetry)
		level := slog.LevelDebug
		if h.fails == 1 {
			level = slog.LevelWarn
		}
		w.log.Log(context.Background(), level, "worker: heartbeat failed; retrying", "message_id", h.m.ID,
			"attempt", h.fails, "retry_in", d.Round(time.Millisecond), "lease_left", time.Until(h.leaseUntil).Round(time.Second), "error", err)
		h.timer.Reset(d)
	}
}
