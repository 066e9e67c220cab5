package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// The tests in this file use the in-process fake (worker/sqsfake): no local server lets a test
// age a receive by 12 hours, and neither GoAws nor fauxqs returns several messages of one FIFO
// group in one receive, as SQS does.

// visibilityRequests records the VisibilityTimeout of every ChangeMessageVisibility the fake serves.
type visibilityRequests struct {
	mu   sync.Mutex
	secs []int32
}

func (v *visibilityRequests) before(op string, in any) error {
	if c, ok := in.(*sqs.ChangeMessageVisibilityInput); ok {
		v.mu.Lock()
		v.secs = append(v.secs, c.VisibilityTimeout)
		v.mu.Unlock()
	}
	return nil
}

func (v *visibilityRequests) get() []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]int32(nil), v.secs...)
}

// TestRetryOfOldMessage (servers with injected faults): a message first received 13 hours ago is retried after the
// delay its handler asked for, and after the backoff, not at once: SQS's 12-hour cap counts from
// each receive, and this receive is new.
func TestRetryOfOldMessage(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		for _, tc := range []struct {
			name string
			err  error
			want int32
		}{
			{"RetryAfter", worker.RetryAfter(3 * time.Second), 3},
			{"backoff", errors.New("boom"), 4},
			{"RetryBlocked", worker.RetryBlocked(5*time.Second, errors.New("held")), 5},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := s.fresh() // a fake of its own: its faults are not the other subtests\'
				t.Parallel()
				b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 30 * time.Second})
				var vis visibilityRequests
				b.f.SetFaults(sqsfake.Faults{Before: vis.before})
				b.send(t, bodies(1, "old"))
				b.f.AgeFirstReceive(b.url, 13*time.Hour)
				var calls atomic.Int32
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url,
					Backoff: func(int) time.Duration { return 4 * time.Second },
					Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
						if calls.Add(1) == 1 {
							return tc.err
						}
						return nil
					})})
				sqstest.WaitFor(t, 10*time.Second, "the retry's visibility change", func() (bool, string) {
					return len(vis.get()) > 0, ""
				})
				if err := w.StopAndCancel(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := vis.get(); got[0] != tc.want {
					t.Errorf("visibility asked for the retry = %d s, want %d s (all: %v)", got[0], tc.want, got)
				}
				if v := b.f.Violations(); len(v) > 0 {
					t.Errorf("the worker asked for what SQS refuses: %v", v)
				}
			})
		}
	})
}

// TestLongHandlerOnOldMessage (servers with injected faults): a handler that runs for several visibility timeouts on
// a message first received 13 hours ago keeps its lease, finishes, and its message is deleted
// after one delivery.
func TestLongHandlerOnOldMessage(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: time.Second})
		b.send(t, bodies(1, "old"))
		b.f.AgeFirstReceive(b.url, 13*time.Hour)
		met := newTestMetrics()
		causes := make(chan error, 1)
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				ok := sqstest.PollUntil(ctx, 15*time.Second, func() bool { return met.get(worker.Heartbeats) >= 4 })
				if !ok {
					causes <- context.Cause(ctx)
					return errors.New("the lease did not last four heartbeats")
				}
				return nil
			})})
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		select {
		case c := <-causes:
			t.Fatalf("the handler lost its lease: %v", c)
		default:
		}
		for _, m := range b.f.Messages(b.url) {
			if m.ReceiveCount != 1 {
				t.Errorf("%s received %d times, want once", m.Body, m.ReceiveCount)
			}
		}
		if p := met.get(worker.Processed); p != 1 {
			t.Errorf("processed %d, want 1", p)
		}
		if v := b.f.Violations(); len(v) > 0 {
			t.Errorf("the worker asked for what SQS refuses: %v", v)
		}
	})
}

// TestTwelveHourCap (servers with injected faults): 12 hours after the receive that delivered it (the worker's and
// the fake's clocks moved forward together), a message is extended only up to the cap, never past
// it, and its handler is then cancelled with ErrLeaseLost.
func TestTwelveHourCap(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second})
		b.send(t, bodies(1, "long"))
		var offset atomic.Int64
		met := newTestMetrics()
		started := make(chan struct{})
		cause := make(chan error, 1)
		w, err := worker.New(s.client, &worker.Config{QueueURL: b.url, Metrics: met, Logger: sqstest.Logger(t),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			})})
		if err != nil {
			t.Fatal(err)
		}
		worker.SetClock(w, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		<-started
		const age = 12*time.Hour - 9*time.Second
		b.f.AgeReceive(b.url, age)
		offset.Store(int64(age))
		select {
		case c := <-cause:
			if !errors.Is(c, worker.ErrLeaseLost) {
				t.Errorf("cause = %v, want ErrLeaseLost", c)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handler was not cancelled at the cap")
		}
		workertest.Stop(t, w)
		if v := b.f.Violations(); len(v) > 0 {
			t.Errorf("the worker asked for what SQS refuses: %v", v)
		}
	})
}

// TestFIFOHeldMessagesKeepTheirLease (servers with several messages of a group per receive and injected faults): one FIFO group of three messages arrives in one
// receive; the head runs 5 s with a 2 s visibility timeout, the others 0.5 s. The two held
// behind the head keep their lease, so no other poller receives them: the group never runs two handlers at once, each
// message runs once, and every delete succeeds.
func TestFIFOHeldMessagesKeepTheirLease(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch, sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo", VisibilityTimeout: 2 * time.Second})
		var msgs []sqstest.Message
		for i := range 3 {
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf("m%d", i), GroupID: "g", DedupID: fmt.Sprint(i)})
		}
		b.send(t, msgs)
		met := newTestMetrics()
		var running, overlaps atomic.Int32
		var mu sync.Mutex
		runs := map[string]int{}
		var order []string
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met, Concurrency: 10,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				mu.Lock()
				runs[string(m.Body)]++
				order = append(order, string(m.Body))
				mu.Unlock()
				// The head's work outlasts the visibility timeout twice over; the others' outlasts
				// the batched delete of the one before, which unlocks the group in SQS.
				work := 500 * time.Millisecond
				if string(m.Body) == "m0" {
					work = 5 * time.Second
				}
				t := time.NewTimer(work)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})})
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		if n := overlaps.Load(); n > 0 {
			t.Errorf("%d handler runs overlapped within one group", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range 3 {
			if n := runs[fmt.Sprintf("m%d", i)]; n != 1 {
				t.Errorf("m%d ran %d times, want once (order %v)", i, n, order)
			}
		}
		if f := met.get(worker.DeleteFailures); f > 0 {
			t.Errorf("%d deletes failed", f)
		}
		for _, m := range b.f.Messages(b.url) {
			if m.ReceiveCount != 1 {
				t.Errorf("%s received %d times, want once", m.Body, m.ReceiveCount)
			}
		}
		if v := b.f.Violations(); len(v) > 0 {
			t.Errorf("the worker asked for what SQS refuses: %v", v)
		}
	})
}

// TestFIFOExpiredHandleIsGone (servers with FIFO and injected faults): on a FIFO queue, a delete refused with
// InvalidParameterValue ("The receipt handle has expired") means the message is no longer ours:
// it is not retried and not counted as a failed delete.
func TestFIFOExpiredHandleIsGone(t *testing.T) {
	eachServer(t, needs(sqstest.FIFO, sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo", VisibilityTimeout: 30 * time.Second})
		b.f.SetFaults(sqsfake.Faults{DeleteEntry: func(string) string { return "InvalidParameterValue" }})
		b.send(t, []sqstest.Message{{Body: "x", GroupID: "g", DedupID: "1"}})
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error { return nil })})
		sqstest.WaitFor(t, 10*time.Second, "the delete settled", func() (bool, string) {
			return met.get(worker.Deleted)+met.get(worker.DeleteFailures) > 0, ""
		})
		workertest.Stop(t, w)
		if n := b.f.Calls("DeleteMessageBatch"); n != 1 {
			t.Errorf("DeleteMessageBatch called %d times, want 1 (an expired handle is not retried)", n)
		}
		if f := met.get(worker.DeleteFailures); f != 0 {
			t.Errorf("delete failures %d, want 0", f)
		}
	})
}
