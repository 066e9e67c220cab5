package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// outageRecorder is a handler whose dependency is down while down is set (every call then
// returns worker.Unavailable), and which records each call's receive count and the order in
// which the messages of each group succeeded. As a BatchHandler it runs each message through
// Batch.Run and keeps the FIFO rule itself, as any batch handler must.
type outageRecorder struct {
	down  atomic.Bool
	fails atomic.Int32

	mu     sync.Mutex
	counts map[string][]int    // body: the receive count of each call
	done   map[string][]string // group: bodies in the order they succeeded
}

func (r *outageRecorder) Handle(_ context.Context, m *worker.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts, r.done = map[string][]int{}, map[string][]string{}
	}
	r.counts[string(m.Body)] = append(r.counts[string(m.Body)], m.ReceiveCount)
	if r.down.Load() {
		r.fails.Add(1)
		return worker.Unavailable(errors.New("database down"))
	}
	r.done[m.GroupID] = append(r.done[m.GroupID], string(m.Body))
	return nil
}

type batchedOutage struct{ *outageRecorder }

func (r batchedOutage) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	res := make([]error, b.Len())
	halted := map[string]bool{}
	for i := range b.Len() {
		m := b.Message(i)
		if halted[m.GroupID] {
			res[i] = worker.ErrNotRun
			continue
		}
		res[i] = b.Run(b.Context(i), i, func(ctx context.Context) error { return r.Handle(ctx, m) })
		if res[i] != nil {
			halted[m.GroupID] = true
		}
	}
	return res
}

// TestFIFOOutageKeepsGroupsInHand (servers with several messages of a group per receive: the fake):
// a FIFO queue of three groups of eight, two runners, the handler's dependency down for longer
// than two visibility timeouts. The messages in hand when the outage begins (a running batch and
// the rest of each group from its receive) are kept, leased, in their groups: one probes at a
// time, none is released or retried through SQS, so every handler call sees receive count 1 and
// nothing is received again; when the dependency is back each group runs to the end in the order
// sent. Before FIFO groups were parked, the head of each group was retried through SQS at every
// probe (receive counts 2, 3, ...) and the messages behind it were released.
func TestFIFOOutageKeepsGroupsInHand(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch), func(t *testing.T, s *server) {
		for _, batched := range []bool{false, true} {
			t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
				t.Parallel()
				const vis = 2 * time.Second
				b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo", VisibilityTimeout: vis})
				var msgs []sqstest.Message
				want := map[string][]string{}
				for i := range 8 {
					for g := range 3 {
						gid := fmt.Sprint("g", g)
						body := fmt.Sprintf("%s-m%d", gid, i)
						msgs = append(msgs, sqstest.Message{Body: body, GroupID: gid})
						want[gid] = append(want[gid], body)
					}
				}
				b.send(t, msgs)
				r := &outageRecorder{}
				r.down.Store(true)
				met := newTestMetrics()
				cfg := &worker.Config{QueueURL: b.url, Concurrency: 2, Metrics: met, Backoff: noBackoff, Handler: r}
				if batched {
					cfg.Handler, cfg.HandlerBatch = batchedOutage{r}, 4
				}
				w := workertest.Start(t, s.client, cfg)
				sqstest.WaitFor(t, 20*time.Second, "the worker paused, and probing", func() (bool, string) {
					return w.State().Paused && r.fails.Load() >= 3, fmt.Sprint(r.fails.Load(), " failed calls")
				})
				// Past two visibility timeouts: without heartbeats the kept messages would be
				// visible again.
				down := time.Now()
				sqstest.WaitFor(t, time.Minute, "the outage to last 2.5 visibility timeouts", func() (bool, string) {
					return time.Since(down) > 5*vis/2, ""
				})
				r.down.Store(false)
				b.waitDeleted(t, 30*time.Second)
				workertest.Stop(t, w)

				r.mu.Lock()
				defer r.mu.Unlock()
				for gid, bodies := range want {
					if !slices.Equal(r.done[gid], bodies) {
						t.Errorf("group %s succeeded in the order %v, want %v", gid, r.done[gid], bodies)
					}
				}
				again := 0
				for body, counts := range r.counts {
					if slices.Max(counts) > 1 {
						again++
						t.Logf("%s: receive counts %v", body, counts)
					}
				}
				if again > 0 {
					t.Errorf("%d messages were received again in the outage, want none: messages in hand were sent back", again)
				}
				if n := met.get(worker.Released); n != 0 {
					t.Errorf("%d messages released, want none", n)
				}
				if f := r.fails.Load(); f < 3 {
					t.Errorf("%d failed calls: the outage was not probed", f)
				}
			})
		}
	})
}

// TestFIFOStopInAnOutage (servers with several messages of a group per receive: the fake): a
// worker stopped while its FIFO groups wait out an outage in its runners stops within its
// shutdown budget and hands every message back: none stays in flight at the server, and none ran
// to success.
func TestFIFOStopInAnOutage(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo", VisibilityTimeout: 30 * time.Second})
		var msgs []sqstest.Message
		for i := range 6 {
			for g := range 3 {
				msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf("g%d-m%d", g, i), GroupID: fmt.Sprint("g", g)})
			}
		}
		b.send(t, msgs)
		r := &outageRecorder{}
		r.down.Store(true)
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, Backoff: noBackoff,
			Handler: batchedOutage{r}, HandlerBatch: 4})
		sqstest.WaitFor(t, 20*time.Second, "the worker paused, and probing", func() (bool, string) {
			return w.State().Paused && r.fails.Load() >= 2, fmt.Sprint(r.fails.Load(), " failed calls")
		})
		workertest.Stop(t, w)
		inFlight := 0
		for _, m := range b.f.Messages(b.url) {
			if m.InFlight {
				inFlight++
			}
		}
		if n := len(b.f.Messages(b.url)); n != len(msgs) || inFlight != 0 {
			t.Errorf("after the stop the queue holds %d messages, %d in flight; want %d, none in flight", n, inFlight, len(msgs))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for g, done := range r.done {
			t.Errorf("group %s ran %v in the outage", g, done)
		}
	})
}
