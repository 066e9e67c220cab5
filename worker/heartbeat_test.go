package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// countLines counts the lines of log that contain every one of substrs.
func countLines(log *sqstest.Buffer, substrs ...string) int {
	n := 0
	for line := range strings.Lines(log.String()) {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// heartbeatOutage runs one long handler on a fake queue with a 12 s visibility timeout (a
// heartbeat every 4 s) while ChangeMessageVisibility fails for the first failFor calls (all of
// them when failFor < 0). The handler returns when stop closes or its context ends.
type heartbeatOutage struct {
	attempts atomic.Int32
	cause    atomic.Value
	log      sqstest.Buffer
	met      *testMetrics
	b        *fakeBundle
	w        *worker.Worker
}

func startHeartbeatOutage(t *testing.T, s *server, failFor int32, stop <-chan struct{}) *heartbeatOutage {
	h := &heartbeatOutage{met: newTestMetrics(), b: s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 12 * time.Second})}
	h.b.f.SetFaults(sqsfake.Faults{Before: func(op string, in any) error {
		if _, ok := in.(*sqs.ChangeMessageVisibilityInput); !ok {
			return nil
		}
		if n := h.attempts.Add(1); failFor < 0 || n <= failFor {
			return sqsfake.Error("InternalError", "service unavailable")
		}
		return nil
	}})
	h.b.send(t, []sqstest.Message{{Body: "long"}})
	h.w = workertest.Start(t, h.b.f, &worker.Config{QueueURL: h.b.url, Metrics: h.met,
		Logger: slog.New(slog.NewTextHandler(&h.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				h.cause.Store(context.Cause(ctx))
				return ctx.Err()
			}
		})})
	return h
}

// TestHeartbeatBacksOff (servers with injected faults): while SQS refuses every extension, the heartbeat retries with
// growing delays (not every second), warns once, and keeps trying until the lease is nearly gone;
// then it cancels the handler with ErrLeaseLost.
func TestHeartbeatBacksOff(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		start := time.Now()
		h := startHeartbeatOutage(t, s, -1, nil)
		sqstest.WaitFor(t, 30*time.Second, "the handler cancelled", func() (bool, string) {
			return h.cause.Load() != nil, ""
		})
		elapsed := time.Since(start)
		if c, _ := h.cause.Load().(error); !errors.Is(c, worker.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", c)
		}
		// The first extension is due at 4 s and the lease ends at 12 s. Retrying every second would
		// make 7 attempts (4 s to 10 s); backing off from 1 s makes 4 or 5.
		if n := h.attempts.Load(); n < 2 || n > 5 {
			t.Errorf("%d extension attempts during the outage; want 2 to 5", n)
		}
		if elapsed < 9*time.Second {
			t.Errorf("the handler was cancelled %v after the start; the heartbeat gave up before the lease's last 2 s", elapsed)
		}
		if n := countLines(&h.log, "level=WARN", "heartbeat failed"); n != 1 {
			t.Errorf("%d warnings for the failed heartbeats; want 1 (the rest at debug level)", n)
		}
		if n := countLines(&h.log, "level=DEBUG", "heartbeat failed"); n < 2 {
			t.Errorf("%d debug lines for the later failures; want at least 2", n)
		}
	})
}

// TestHeartbeatRecovers (servers with injected faults): an outage of two extension attempts, shorter than the lease,
// costs nothing: the next extension succeeds, the handler finishes, and the message, received
// once, is deleted.
func TestHeartbeatRecovers(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		stop := make(chan struct{})
		h := startHeartbeatOutage(t, s, 2, stop)
		sqstest.WaitFor(t, 30*time.Second, "an extension after the outage", func() (bool, string) {
			return h.met.get(worker.Heartbeats) >= 1, ""
		})
		close(stop)
		h.b.waitDeleted(t, 10*time.Second)
		workertest.Stop(t, h.w)
		if c := h.cause.Load(); c != nil {
			t.Errorf("the handler was cancelled: %v", c)
		}
		if n := countLines(&h.log, "level=INFO", "heartbeat recovered", "failed_attempts=2"); n != 1 {
			t.Errorf("%d 'heartbeat recovered' lines with failed_attempts=2; want 1", n)
		}
		for _, m := range h.b.f.Messages(h.b.url) {
			if m.ReceiveCount != 1 {
				t.Errorf("%s received %d times; want once", m.Body, m.ReceiveCount)
			}
		}
	})
}
